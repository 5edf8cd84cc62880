// Who may do what on the coordinator: tokens name users, users have roles,
// and each control call is allowed or refused (PERMISSION_DENIED naming the
// user and the action). No gRPC here: the service hands over the
// authorization header's value and the job's owner.
//
// Three ways to run: open (no tokens: every caller is an anonymous admin,
// jobs have no owner), one token (--auth-token-file: one admin, "admin"),
// or a users file (--users-file: a text proto of petra.v1.UsersConfig).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/access.pb.h"

namespace petra::coordinator {

// The control calls, as the audit log and refusals name them.
enum class Action {
  kSubmit,
  kGet,
  kList,
  kWatch,
  kCancel,
  kExport,
  kListServers
};
const char* ActionName(Action action);  // "SubmitJob", ...

// The caller of one call.
struct Principal {
  std::string user;  // "" when the coordinator has no tokens
  petra::v1::Role role = petra::v1::ROLE_ADMIN;
};

std::string RoleName(petra::v1::Role role);  // "admin", "member", "viewer"

class AccessControl {
 public:
  // Every caller is an anonymous admin.
  static AccessControl Open();
  // One token, one admin named "admin" (the single --auth-token-file).
  static AccessControl SingleToken(const std::string& token);
  // From a UsersConfig, checked: names and tokens well formed and unique,
  // every role given. `source` starts the errors (the file's name).
  static absl::StatusOr<AccessControl> FromConfig(
      const petra::v1::UsersConfig& config, const std::string& source);
  // The users file at `path` (text proto, at most 1 MiB).
  static absl::StatusOr<AccessControl> FromFile(const std::string& path);

  bool open() const { return users_.empty(); }
  int user_count() const { return static_cast<int>(users_.size()); }

  // The caller of the authorization header's value (nullopt: none sent).
  // UNAUTHENTICATED, saying what is wrong, unless open.
  absl::StatusOr<Principal> Identify(
      const std::optional<std::string>& authorization) const;

  // OK, or PERMISSION_DENIED naming the user, role, action and job. `owner`
  // is the job's (ignored for kSubmit and kList); `job_id` is for the
  // message only.
  static absl::Status Authorize(const Principal& who, Action action,
                                const std::string& job_id,
                                const std::string& owner);
  // A submission's JobSpec.priority: above 0 (ahead of the team's
  // default) only for admins; PERMISSION_DENIED naming the user otherwise.
  static absl::Status AuthorizePriority(const Principal& who, int32_t priority);

 private:
  // Token -> user. Compared in constant time against each token.
  std::map<std::string, Principal> users_;
};

}  // namespace petra::coordinator
