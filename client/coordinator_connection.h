// How every `petra` command that talks to the coordinator finds and reaches
// it: the connection flags (with their environment defaults), the stub, and
// one way of saying why a call failed.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "petra/v1/coordinator.grpc.pb.h"
#include "services/base/flag_set.h"
#include "services/wire/tls_flags.h"

namespace petra::client {

// Where the coordinator is and how to talk to it.
struct Connection {
  std::string address;
  wire::TlsOptions tls;
  std::string token_file;
};

// --coordinator, the TLS flags and --auth-token-file, each defaulting to
// its environment variable (docs/USING.md, "From scripts").
void AddCoordinatorFlag(base::FlagSet& flags, Connection* c);

// Connects, or explains on stderr why the address, the TLS files or the
// token are not usable (nullptr).
std::unique_ptr<petra::v1::CoordinatorService::Stub> Connect(
    const std::string& command, const Connection& c);

// What to check when the coordinator at an address is unreachable, from
// gRPC's message: "; ..." (a refused connection, a name that does not
// resolve, else the TLS files).
std::string UnreachableHint(const std::string& grpc_message, bool with_tls);

// Says why a call failed (an unreachable coordinator with what to check);
// returns the exit code, 1.
int Fail(const std::string& command, const grpc::Status& s,
         const Connection& c);

// GetJob of `id`: -1 with `job` filled, or the exit code after saying why
// it failed.
int FetchJob(petra::v1::CoordinatorService::Stub& stub, const std::string& id,
             const std::string& command, const Connection& coordinator,
             petra::v1::Job* job);

// The one JOB_ID argument after the flags, or the exit code to stop with
// (-1: go on).
int TakeJobId(const std::string& command, const std::vector<std::string>& rest,
              std::string* id);

// What every command on one job starts with: flags parsed, the one JOB_ID
// argument after them, a stub. Returns an exit code to stop with, or -1 to
// go on.
int PrepareJobCommand(
    base::FlagSet& flags, const std::string& command,
    const std::vector<std::string>& args, const Connection& coordinator,
    std::string* id,
    std::unique_ptr<petra::v1::CoordinatorService::Stub>* stub);

}  // namespace petra::client
