// CoordinatorService over gRPC's callback API.
#pragma once

#include "petra/v1/coordinator.grpc.pb.h"

namespace petra::coordinator {

class CoordinatorServiceImpl final
    : public petra::v1::CoordinatorService::CallbackService {
 public:
  explicit CoordinatorServiceImpl(int fleet_size);

  grpc::ServerUnaryReactor* SubmitJob(
      grpc::CallbackServerContext* context,
      const petra::v1::SubmitJobRequest* request,
      petra::v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const petra::v1::GetJobRequest* request,
                                   petra::v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(
      grpc::CallbackServerContext* context,
      const petra::v1::ListJobsRequest* request,
      petra::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(
      grpc::CallbackServerContext* context,
      const petra::v1::CancelJobRequest* request,
      petra::v1::Job* response) override;

 private:
  const int fleet_size_;
};

}  // namespace petra::coordinator
