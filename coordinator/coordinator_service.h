// CoordinatorService over gRPC's callback API: a thin adapter over the job
// manager. Watch and Export are server streams written one message at a
// time. Every call is identified and authorized by the access control
// (UNAUTHENTICATED without a known token, PERMISSION_DENIED beyond the
// caller's role) and, with its result, appended to the audit log; the
// health and reflection services are not part of this service and stay
// open.
#pragma once

#include "coordinator/access_control.h"
#include "coordinator/audit_log.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "services/engine/serial_executor.h"

namespace petra::coordinator {

class CoordinatorServiceImpl final
    : public petra::v1::CoordinatorService::CallbackService {
 public:
  // `access` and `audit` (null: no audit log) outlive the service.
  CoordinatorServiceImpl(JobManager* jobs, CoordinatorMetrics* metrics,
                         const AccessControl* access, AuditLog* audit);

  grpc::ServerUnaryReactor* SubmitJob(
      grpc::CallbackServerContext* context,
      const petra::v1::SubmitJobRequest* request,
      petra::v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const petra::v1::GetJobRequest* request,
                                   petra::v1::Job* response) override;
  grpc::ServerWriteReactor<petra::v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* context,
      const petra::v1::WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* ListJobs(
      grpc::CallbackServerContext* context,
      const petra::v1::ListJobsRequest* request,
      petra::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(
      grpc::CallbackServerContext* context,
      const petra::v1::CancelJobRequest* request,
      petra::v1::Job* response) override;
  grpc::ServerWriteReactor<petra::v1::ExportChunk>* ExportJob(
      grpc::CallbackServerContext* context,
      const petra::v1::ExportJobRequest* request) override;
  grpc::ServerUnaryReactor* ListServers(
      grpc::CallbackServerContext* context,
      const petra::v1::ListServersRequest* request,
      petra::v1::ListServersResponse* response) override;

 private:
  // The caller of `context`, allowed `action` on `job_id` (the job's owner
  // looked up when the role needs it). Fills `record` (who, what, whence)
  // for the audit line written when the call ends; a refusal is counted
  // and audited here.
  absl::StatusOr<Principal> Admit(grpc::CallbackServerContext* context,
                                  Action action, const std::string& job_id,
                                  petra::v1::AuditRecord& record);

  JobManager* jobs_;
  CoordinatorMetrics* metrics_;
  const AccessControl* access_;
  AuditLog* audit_;
  // Disk work (job records written by submit and cancel, export reads):
  // reactions never block on it.
  engine::SerialExecutor io_;
};

}  // namespace petra::coordinator
