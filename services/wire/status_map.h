// absl::Status <-> grpc::Status, the only place the two meet. Inside the code
// errors are absl::Status; gRPC status exists only at the RPC edge.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "petra/v1/common.pb.h"

namespace petra::wire {

// Messages longer than this are cut (saying how much): a message that
// repeats what a client sent (a job id, a path) could otherwise pass the
// 8 KiB of headers a gRPC client accepts, and the reply would be lost with
// its connection.
inline constexpr size_t kMaxStatusMessageBytes = 2048;

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// For per-message errors inside a stream (petra.v1.Status).
petra::v1::Status ToProtoStatus(const absl::Status& status);
absl::Status FromProtoStatus(const petra::v1::Status& status);

}  // namespace petra::wire
