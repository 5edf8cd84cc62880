// CoordinatorService over gRPC's callback API: a thin adapter over the job
// manager. Watch and Export are server streams written one message at a
// time.
#pragma once

#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "petra/v1/coordinator.grpc.pb.h"

namespace petra::coordinator {

class CoordinatorServiceImpl final
    : public petra::v1::CoordinatorService::CallbackService {
 public:
  CoordinatorServiceImpl(JobManager* jobs, CoordinatorMetrics* metrics);

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
  JobManager* jobs_;
  CoordinatorMetrics* metrics_;
};

}  // namespace petra::coordinator
