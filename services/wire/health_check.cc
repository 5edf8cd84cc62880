#include "services/wire/health_check.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <future>

#include "absl/strings/str_cat.h"

namespace petra::wire {
namespace {

// Protobuf wire format of the two tiny messages: field 1 of each.
std::string EncodeRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;  // proto3 omits the default value
  out.push_back(0x0a);              // field 1, length-delimited
  for (size_t n = service.size();; n >>= 7) {
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  return out + service;
}

absl::StatusOr<ServingStatus> DecodeResponse(const std::string& bytes) {
  if (bytes.empty()) return ServingStatus::kUnknown;
  if (bytes.size() == 2 && bytes[0] == 0x08 && bytes[1] >= 0 && bytes[1] <= 3) {
    return static_cast<ServingStatus>(bytes[1]);
  }
  return absl::DataLossError("unreadable grpc.health.v1 HealthCheckResponse");
}

}  // namespace

const char* ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case ServingStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

absl::StatusOr<ServingStatus> CheckHealth(const std::string& address,
                                          const std::string& service,
                                          std::chrono::milliseconds timeout,
                                          const TransportSecurity& security) {
  grpc::GenericStub stub(
      grpc::CreateChannel(address, MakeChannelCredentials(security)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  std::string request_bytes = EncodeRequest(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    // The health service answers NOT_FOUND for a service it does not know.
    return ServingStatus::kServiceUnknown;
  }
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "health check of ", address, " failed: ", status.error_message()));
  }
  std::string bytes;
  if (response.Valid()) {  // an all-default answer may carry no bytes
    grpc::Slice whole;
    if (!response.DumpToSingleSlice(&whole).ok()) {
      return absl::DataLossError("unreadable grpc.health.v1 answer");
    }
    bytes.assign(reinterpret_cast<const char*>(whole.begin()), whole.size());
  }
  return DecodeResponse(bytes);
}

}  // namespace petra::wire
