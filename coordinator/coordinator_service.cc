#include "coordinator/coordinator_service.h"

#include "absl/strings/str_cat.h"
#include "services/job/job_spec_validation.h"
#include "services/wire/status_map.h"

namespace petra::coordinator {
namespace {

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(status));
  return reactor;
}

absl::Status NoSuchJob(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("no job with id \"", id, "\""));
}

}  // namespace

CoordinatorServiceImpl::CoordinatorServiceImpl(int fleet_size)
    : fleet_size_(fleet_size) {}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::SubmitJob(
    grpc::CallbackServerContext* context,
    const petra::v1::SubmitJobRequest* request, petra::v1::Job* /*response*/) {
  absl::StatusOr<petra::v1::JobSpec> spec =
      job::ResolveJobSpec(request->spec());
  if (!spec.ok()) return FinishWith(context, spec.status());
  const int stages = job::StageCount(*spec);
  if (stages > fleet_size_) {
    return FinishWith(context, absl::FailedPreconditionError(
                                   absl::StrCat("the job needs ", stages,
                                                " stage servers but the "
                                                "fleet has ",
                                                fleet_size_, " (--stages)")));
  }
  // The stage engine is not wired to the fleet in this build: say so rather
  // than accept a job that would never run.
  return FinishWith(context, absl::UnimplementedError(
                                 "the spec is valid, but this coordinator "
                                 "build cannot run jobs yet"));
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::GetJob(
    grpc::CallbackServerContext* context,
    const petra::v1::GetJobRequest* request, petra::v1::Job* /*response*/) {
  return FinishWith(context, NoSuchJob(request->job_id()));
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::ListJobs(
    grpc::CallbackServerContext* context,
    const petra::v1::ListJobsRequest* /*request*/,
    petra::v1::ListJobsResponse* /*response*/) {
  // No job can have been accepted (see SubmitJob), so the list is empty.
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::CancelJob(
    grpc::CallbackServerContext* context,
    const petra::v1::CancelJobRequest* request, petra::v1::Job* /*response*/) {
  return FinishWith(context, NoSuchJob(request->job_id()));
}

}  // namespace petra::coordinator
