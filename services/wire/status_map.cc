#include "services/wire/status_map.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace petra::wire {

// The canonical codes share their numbers in absl and gRPC (both follow
// google.rpc.Code), so mapping is a cast; out-of-range codes become UNKNOWN.
namespace {
constexpr int kMaxCanonicalCode = 16;  // UNAUTHENTICATED

int Canonical(int code) {
  return code >= 0 && code <= kMaxCanonicalCode ? code : 2 /* UNKNOWN */;
}

// The message cut to kMaxStatusMessageBytes, at a character's start.
std::string Bounded(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  size_t cut = kMaxStatusMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return absl::StrCat(message.substr(0, cut), " ... (", message.size() - cut,
                      " more bytes)");
}
}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(
      static_cast<grpc::StatusCode>(Canonical(static_cast<int>(status.code()))),
      Bounded(status.message()));
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
  out.set_message(Bounded(status.message()));
  return out;
}

absl::Status FromProtoStatus(const petra::v1::Status& status) {
  if (status.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(Canonical(status.code())),
                      status.message());
}

}  // namespace petra::wire
