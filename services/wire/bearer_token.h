// Bearer tokens: clients send `authorization: Bearer <token>` metadata on
// every call; the coordinator's access control (coordinator/
// access_control.h) compares it in constant time. The token comes from a
// file (--auth-token-file) or, on the client, from the PETRA_AUTH_TOKEN
// environment variable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class ServerContextBase;
namespace experimental {
class ClientInterceptorFactoryInterface;
}  // namespace experimental
}  // namespace grpc

namespace petra::wire {

inline constexpr char kAuthTokenEnv[] = "PETRA_AUTH_TOKEN";

// A token as read from a file or the environment: surrounding whitespace is
// dropped; what is left must be non-empty printable ASCII without spaces
// (it travels as an HTTP/2 header). `source` names the flag or variable.
absl::StatusOr<std::string> ParseBearerToken(const std::string& text,
                                             const std::string& source);

// The token in `path` for `flag`: "" when the path is "" (no auth).
absl::StatusOr<std::string> LoadBearerToken(const std::string& path,
                                            const std::string& flag);

// A client's token: the file named by `path` (`flag`), else the
// PETRA_AUTH_TOKEN variable, else "" (none sent).
absl::StatusOr<std::string> ClientBearerToken(const std::string& path,
                                              const std::string& flag);

// The token of an `authorization` header's value "Bearer <token>" (the
// scheme in any case); nullopt for another scheme.
std::optional<std::string> BearerTokenOf(const std::string& authorization);

// Whether the call of `context` carries `token` as its bearer token
// (compared in constant time).
bool CallCarriesToken(const grpc::ServerContextBase& context,
                      const std::string& token);

// Adds the token's metadata to every call of a channel.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
BearerTokenInterceptor(const std::string& token);

}  // namespace petra::wire
