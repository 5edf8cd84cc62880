#include "services/wire/status_map.h"

#include <string>

namespace petra::wire {

// The canonical codes share their numbers in absl and gRPC (both follow
// google.rpc.Code), so mapping is a cast; out-of-range codes become UNKNOWN.
namespace {
constexpr int kMaxCanonicalCode = 16;  // UNAUTHENTICATED

int Canonical(int code) {
  return code >= 0 && code <= kMaxCanonicalCode ? code : 2 /* UNKNOWN */;
}
}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(
      static_cast<grpc::StatusCode>(Canonical(static_cast<int>(status.code()))),
      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(Canonical(status.error_code())),
      status.error_message());
}

petra::v1::Status ToProtoStatus(const absl::Status& status) {
  petra::v1::Status out;
  out.set_code(static_cast<int>(status.code()));
  out.set_message(std::string(status.message()));
  return out;
}

absl::Status FromProtoStatus(const petra::v1::Status& status) {
  if (status.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(Canonical(status.code())),
                      status.message());
}

}  // namespace petra::wire
