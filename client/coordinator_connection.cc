#include "client/coordinator_connection.h"

#include <cstdlib>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/wire/bearer_token.h"
#include "services/wire/grpc_defaults.h"

namespace petra::client {
namespace {

using petra::v1::CoordinatorService;

constexpr char kDefaultCoordinator[] = "localhost:50050";
// Defaults of the connection flags, for scripts (docs/USING.md, "From
// scripts").
constexpr char kCoordinatorEnv[] = "PETRA_COORDINATOR";
constexpr char kTlsCaEnv[] = "PETRA_TLS_CA";
constexpr char kTlsCertEnv[] = "PETRA_TLS_CERT";
constexpr char kTlsKeyEnv[] = "PETRA_TLS_KEY";
constexpr char kAuthTokenFileEnv[] = "PETRA_AUTH_TOKEN_FILE";

// A flag's default from the environment, so scripts set the connection
// once; the flag, when given, wins.
std::string FromEnv(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

int FetchJob(CoordinatorService::Stub& stub, const std::string& id,
             const std::string& command, const Connection& coordinator,
             petra::v1::Job* job) {
  grpc::ClientContext context;
  petra::v1::GetJobRequest request;
  request.set_job_id(id);
  grpc::Status s = stub.GetJob(&context, request, job);
  return s.ok() ? -1 : Fail(command, s, coordinator);
}

int TakeJobId(const std::string& command, const std::vector<std::string>& rest,
              std::string* id) {
  if (rest.size() != 1) {
    std::cerr << command << ": expected one JOB_ID argument, got "
              << rest.size() << "; see --help\n";
    return 2;
  }
  *id = rest[0];
  return -1;
}

void AddCoordinatorFlag(base::FlagSet& flags, Connection* c) {
  c->address = FromEnv(kCoordinatorEnv, kDefaultCoordinator);
  c->tls.ca_file = FromEnv(kTlsCaEnv, "");
  c->tls.cert_file = FromEnv(kTlsCertEnv, "");
  c->tls.key_file = FromEnv(kTlsKeyEnv, "");
  c->token_file = FromEnv(kAuthTokenFileEnv, "");
  flags.AddString("coordinator", &c->address,
                  absl::StrCat("coordinator address, host:port (env ",
                               kCoordinatorEnv, ")"));
  wire::AddClientTlsFlags(flags, &c->tls);
  flags.AddString("auth-token-file", &c->token_file,
                  absl::StrCat("file holding the coordinator's bearer token "
                               "(env ",
                               kAuthTokenFileEnv,
                               "; without either, the token "
                               "itself from ",
                               wire::kAuthTokenEnv, ")"));
}

std::unique_ptr<CoordinatorService::Stub> Connect(const std::string& command,
                                                  const Connection& c) {
  if (absl::Status s = wire::ValidateAddress(c.address, "--coordinator", false);
      !s.ok()) {
    std::cerr << command << ": " << s.message() << "\n";
    return nullptr;
  }
  absl::StatusOr<wire::TransportSecurity> security =
      wire::LoadTransportSecurity(c.tls, wire::TlsRole::kClient);
  if (!security.ok()) {
    std::cerr << command << ": " << security.status().message() << "\n";
    return nullptr;
  }
  absl::StatusOr<std::string> token =
      wire::ClientBearerToken(c.token_file, "--auth-token-file");
  if (!token.ok()) {
    std::cerr << command << ": " << token.status().message() << "\n";
    return nullptr;
  }
  return CoordinatorService::NewStub(
      wire::CreateChannel(c.address, *security, *token));
}

std::string UnreachableHint(const std::string& grpc_message, bool with_tls) {
  const std::string m = absl::AsciiStrToLower(grpc_message);
  // Refused or unresolved: no TLS setting would help, so none is offered.
  if (absl::StrContains(m, "connection refused")) {
    return "; nothing listens there: is the coordinator running, on that "
           "--listen address?";
  }
  if (absl::StrContains(m, "dns") || absl::StrContains(m, "resolve")) {
    return "; the name does not resolve";
  }
  return with_tls ? "; check that --tls-ca, --tls-cert and --tls-key match "
                    "the coordinator's"
                  : "; if it serves TLS, give --tls-ca";
}

int Fail(const std::string& command, const grpc::Status& s,
         const Connection& c) {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::cerr << command << ": cannot reach the coordinator at " << c.address
              << " (" << s.error_message() << ")"
              << UnreachableHint(s.error_message(), !c.tls.empty()) << "\n";
  } else {
    std::cerr << command << ": " << s.error_message() << "\n";
  }
  return 1;
}

int PrepareJobCommand(base::FlagSet& flags, const std::string& command,
                      const std::vector<std::string>& args,
                      const Connection& coordinator, std::string* id,
                      std::unique_ptr<CoordinatorService::Stub>* stub) {
  if (int rc = base::ParseCommandOrExit(flags, command, args, true); rc >= 0)
    return rc;
  if (int rc = TakeJobId(command, flags.positional(), id); rc >= 0) return rc;
  *stub = Connect(command, coordinator);
  return *stub == nullptr ? 2 : -1;
}

}  // namespace petra::client
