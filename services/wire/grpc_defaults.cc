#include "services/wire/grpc_defaults.h"

#include <grpc/support/log.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <iostream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/wire/bearer_token.h"

namespace petra::wire {
namespace {

// Integer arguments of both ends' channels.
std::vector<std::pair<const char*, int>> CommonArguments() {
  return {
      {GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs},
      {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs},
      {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
      {GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0},
      // Activations are megabytes: HTTP/2's default 16 KiB frames and
      // 8 KiB first reads cut each into hundreds of pieces, each with its
      // own header, wake-up and window update.
      {GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kHttp2FrameBytes},
      {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kMaxMessageBytes},
      {GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 256 << 10},
      {GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, kHttp2FrameBytes},
  };
}

}  // namespace

void ApplyServerDefaults(grpc::ServerBuilder& builder) {
  // Both must be switched on before the builder creates the server.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC binds with SO_REUSEPORT by default, so a second server on a busy
  // port would start and silently take half the connections. Refuse it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (const auto& [name, value] : CommonArguments()) {
    builder.AddChannelArgument(name, value);
  }
  // A request's headers (the bearer token, the data key) are well under
  // 1 KiB: a caller's larger ones are refused (gRPC 1.51 still reads them
  // whole first; docs/RELIABILITY.md, "Hostile input", has what that costs).
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  // Accept the clients' pings at the keepalive rate above.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      kKeepaliveTimeMs / 2);
}

grpc::ChannelArguments ClientChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  for (const auto& [name, value] : CommonArguments()) {
    args.SetInt(name, value);
  }
  // A restarted stage server must be reached again within seconds (crash
  // recovery); gRPC's default backoff grows to two minutes.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              kMaxReconnectBackoffMs / 2);
  return args;
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address) {
  return CreateChannel(address, TransportSecurity());
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const TransportSecurity& security,
                                             const std::string& bearer_token) {
  if (bearer_token.empty()) {
    return grpc::CreateCustomChannel(address, MakeChannelCredentials(security),
                                     ClientChannelArguments());
  }
  // An interceptor rather than call credentials: gRPC refuses to send call
  // credentials over plaintext, and a token without TLS is still allowed
  // (on a trusted network, or in docker-compose).
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(BearerTokenInterceptor(bearer_token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, MakeChannelCredentials(security), ClientChannelArguments(),
      std::move(interceptors));
}

std::shared_ptr<grpc::Channel> CreateBulkChannel(
    const std::string& address, const TransportSecurity& security, int index) {
  grpc::ChannelArguments args = ClientChannelArguments();
  // Subchannels (connections) are shared between channels whose arguments
  // are equal: a distinct argument per index and a pool of the channel's
  // own keep them apart.
  args.SetInt("petra.bulk_connection", index);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, MakeChannelCredentials(security),
                                   args);
}

namespace {

// gRPC's own log while a server binds: a failed bind prints a raw error
// ("UNKNOWN:No address added out of total 1 resolved ... Address already in
// use ...") before ours. It is held here instead, and its cause named in
// our one line. One server binds at a time here (the log function is
// process-wide).
class HeldGrpcLog {
 public:
  HeldGrpcLog() : one_at_a_time_(binding_) {
    std::lock_guard<std::mutex> lock(mu_);
    text_ = &held_;
    gpr_set_log_function(&Hold);
  }
  ~HeldGrpcLog() {
    gpr_set_log_function(nullptr);  // gRPC's default again
    std::lock_guard<std::mutex> lock(mu_);
    text_ = nullptr;
  }
  const std::string& text() const { return held_; }

 private:
  static void Hold(gpr_log_func_args* args) {
    std::lock_guard<std::mutex> lock(mu_);
    if (text_ != nullptr) absl::StrAppend(text_, args->message, "\n");
  }
  static std::mutex binding_;
  static std::mutex mu_;
  static std::string* text_;
  std::lock_guard<std::mutex> one_at_a_time_;
  std::string held_;
};
std::mutex HeldGrpcLog::binding_;
std::mutex HeldGrpcLog::mu_;
std::string* HeldGrpcLog::text_ = nullptr;

// Why a bind failed, from what gRPC logged.
std::string BindFailure(const std::string& log) {
  if (absl::StrContains(log, "Address already in use")) {
    return "the address is in use (another server on this port?)";
  }
  if (absl::StrContains(log, "Cannot assign requested address")) {
    return "not an address of this host";
  }
  if (absl::StrContains(log, "Permission denied")) {
    return "permission denied (ports below 1024 need privileges)";
  }
  return "address in use, or not an address of this host";
}

}  // namespace

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::string& listen, const std::string& flag,
    const std::vector<grpc::Service*>& services, int* bound_port,
    const TransportSecurity& security) {
  if (absl::Status s = ValidateAddress(listen, flag, true); !s.ok()) return s;
  grpc::ServerBuilder builder;
  ApplyServerDefaults(builder);
  builder.AddListeningPort(listen, MakeServerCredentials(security), bound_port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server;
  std::string log;
  {
    HeldGrpcLog held;
    server = builder.BuildAndStart();
    log = held.text();
  }
  if (server == nullptr || *bound_port == 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on ",
                                               listen, ": ", BindFailure(log)));
  }
  if (!log.empty()) std::cerr << log;  // a server that started: as it was
  return server;
}

absl::Status ValidateAddress(const std::string& address,
                             const std::string& flag, bool allow_port_zero) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", address, "\" ", why,
                     " (expected host:port, e.g. 127.0.0.1:50051 or "
                     "[::1]:50051)"));
  };
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("has no port");
  if (colon == 0) return bad("has no host");
  std::string host = address.substr(0, colon);
  if (host.front() == '[' && host.back() != ']')
    return bad("has an unclosed [");
  if (host.front() != '[' && host.find(':') != std::string::npos) {
    return bad("is an IPv6 address without [brackets]");
  }
  int port;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return bad("has no valid port (0-65535)");
  }
  if (port == 0 && !allow_port_zero) return bad("has port 0");
  return absl::OkStatus();
}

}  // namespace petra::wire
