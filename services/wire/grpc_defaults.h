// gRPC settings every PETRA process uses, in one place: message size limits
// raised on both ends, keepalive, the standard health service and server
// reflection.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/wire/transport_security.h"

namespace grpc {
class Channel;
class Server;
class Service;
class ChannelArguments;
class ServerBuilder;
}  // namespace grpc

namespace petra::wire {

// Largest gRPC message either end accepts. Tensors larger than the chunk
// size below travel in several messages, so this only needs headroom over
// one chunk plus its envelope.
inline constexpr int kMaxMessageBytes = 64 << 20;
// Payload bytes per tensor chunk on the wire.
inline constexpr int kTensorChunkBytes = 16 << 20;
// Largest HTTP/2 frame either end accepts (the protocol allows 16 MiB - 1).
inline constexpr int kHttp2FrameBytes = 4 << 20;

// Largest header block (metadata) a server accepts on a call.
inline constexpr int kMaxMetadataBytes = 16 << 10;

// Keepalive: ping an idle connection every 20 s and drop it when a ping is
// not answered within 10 s, so a dead neighbour is noticed in seconds.
inline constexpr int kKeepaliveTimeMs = 20'000;
inline constexpr int kKeepaliveTimeoutMs = 10'000;
// Longest wait between attempts to reconnect to a server that went away.
inline constexpr int kMaxReconnectBackoffMs = 1'000;

// Applies the limits, keepalive, health service and reflection to a server
// being built. Call before BuildAndStart.
void ApplyServerDefaults(grpc::ServerBuilder& builder);

// Channel arguments for a client of any PETRA server.
grpc::ChannelArguments ClientChannelArguments();

// An insecure channel to `address` (host:port) with the defaults above.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address);
// The same over `security` (plaintext when it is not enabled); a non-empty
// `bearer_token` is sent as `authorization: Bearer <token>` on every call.
std::shared_ptr<grpc::Channel> CreateChannel(
    const std::string& address, const TransportSecurity& security,
    const std::string& bearer_token = "");
// Connection `index` of a bulk data channel to `address`: channels with
// different indexes never share a connection (one HTTP/2 connection is the
// limit a bulk channel stripes past).
std::shared_ptr<grpc::Channel> CreateBulkChannel(
    const std::string& address, const TransportSecurity& security, int index);

// Builds and starts a server on `listen` (host:port, port 0 = ephemeral)
// with the defaults above and the given services, over `security`.
// UNAVAILABLE naming `flag` when the address cannot be bound. *bound_port
// receives the actual port.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::string& listen, const std::string& flag,
    const std::vector<grpc::Service*>& services, int* bound_port,
    const TransportSecurity& security = {});

// Checks a host:port listen or connect address; INVALID_ARGUMENT naming
// `flag` when it is malformed. Port 0 (ephemeral) is allowed when
// `allow_port_zero`.
absl::Status ValidateAddress(const std::string& address,
                             const std::string& flag, bool allow_port_zero);

}  // namespace petra::wire
