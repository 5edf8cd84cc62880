// CoordinatorService over gRPC's callback API: a thin adapter over the job
// manager. Watch and Export are server streams written one message at a
// time. Every call must carry the bearer token when one is configured
// (UNAUTHENTICATED otherwise); the health and reflection services are not
// part of this service and stay open.
#pragma once

#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "petra/v1/coordinator.grpc.pb.h"
#include "services/engine/serial_executor.h"
#include "services/wire/bearer_token.h"

namespace petra::coordinator {

class CoordinatorServiceImpl final
    : public petra::v1::CoordinatorService::CallbackService {
 public:
  CoordinatorServiceImpl(JobManager* jobs, CoordinatorMetrics* metrics,
                         wire::BearerTokenCheck auth = {});

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

 private:
  // The caller's token, counted as an error when refused.
  absl::Status Authenticate(grpc::CallbackServerContext* context) const;

  JobManager* jobs_;
  CoordinatorMetrics* metrics_;
  const wire::BearerTokenCheck auth_;
  // Disk work (job records written by submit and cancel, export reads):
  // reactions never block on it.
  engine::SerialExecutor io_;
};

}  // namespace petra::coordinator
