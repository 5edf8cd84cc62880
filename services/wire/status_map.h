// absl::Status <-> grpc::Status, the only place the two meet. Inside the code
// errors are absl::Status; gRPC status exists only at the RPC edge.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "petra/v1/common.pb.h"

namespace petra::wire {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// For per-message errors inside a stream (petra.v1.Status).
petra::v1::Status ToProtoStatus(const absl::Status& status);
absl::Status FromProtoStatus(const petra::v1::Status& status);

}  // namespace petra::wire
