#include "services/wire/bearer_token.h"

#include <grpcpp/server_context.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/interceptor.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/constant_time.h"
#include "services/base/small_file.h"

namespace petra::wire {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearerPrefix[] = "Bearer ";
// A token is a secret of some dozens of bytes; a big file is a wrong path.
constexpr int64_t kMaxTokenFileBytes = 4096;

class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* header) : header_(header) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorization, *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& token)
      : header_(absl::StrCat(kBearerPrefix, token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerInterceptor(&header_);
  }

 private:
  // Outlives every interceptor: the channel owns the factory.
  const std::string header_;
};

}  // namespace

absl::StatusOr<std::string> ParseBearerToken(const std::string& text,
                                             const std::string& source) {
  const std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the token is empty"));
  }
  for (char c : token) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          source,
          ": the token must be printable ASCII without spaces (it is sent "
          "as an HTTP/2 header)"));
    }
  }
  return token;
}

absl::StatusOr<std::string> LoadBearerToken(const std::string& path,
                                            const std::string& flag) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> text =
      base::ReadSmallFile(path, kMaxTokenFileBytes, "a token");
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat(flag, ": cannot read ", text.status().message()));
  }
  return ParseBearerToken(*text, absl::StrCat(flag, " \"", path, "\""));
}

absl::StatusOr<std::string> ClientBearerToken(const std::string& path,
                                              const std::string& flag) {
  if (!path.empty()) return LoadBearerToken(path, flag);
  const char* env = std::getenv(kAuthTokenEnv);
  if (env == nullptr || *env == '\0') return std::string();
  return ParseBearerToken(env, kAuthTokenEnv);
}

std::optional<std::string> BearerTokenOf(const std::string& authorization) {
  if (!absl::StartsWithIgnoreCase(authorization, kBearerPrefix)) {
    return std::nullopt;
  }
  return authorization.substr(sizeof(kBearerPrefix) - 1);
}

bool CallCarriesToken(const grpc::ServerContextBase& context,
                      const std::string& token) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return false;
  const std::optional<std::string> sent =
      BearerTokenOf(std::string(it->second.data(), it->second.size()));
  return sent.has_value() && base::ConstantTimeEquals(*sent, token);
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
BearerTokenInterceptor(const std::string& token) {
  return std::make_unique<BearerInterceptorFactory>(token);
}

}  // namespace petra::wire
