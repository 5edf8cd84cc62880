#include "coordinator/access_control.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/constant_time.h"
#include "services/base/proto_json.h"
#include "services/base/small_file.h"
#include "services/wire/bearer_token.h"

namespace petra::coordinator {
namespace {

constexpr int64_t kMaxUsersFileBytes = 1 << 20;
constexpr size_t kMaxNameLength = 64;
// Shorter tokens can be guessed; openssl rand -hex 16 gives 32.
constexpr size_t kMinTokenLength = 16;
constexpr char kSingleTokenUser[] = "admin";

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '@' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

bool Reads(Action a) {
  return a == Action::kGet || a == Action::kList || a == Action::kWatch ||
         a == Action::kListServers;
}

}  // namespace

const char* ActionName(Action action) {
  switch (action) {
    case Action::kSubmit:
      return "SubmitJob";
    case Action::kGet:
      return "GetJob";
    case Action::kList:
      return "ListJobs";
    case Action::kWatch:
      return "WatchJob";
    case Action::kCancel:
      return "CancelJob";
    case Action::kExport:
      return "ExportJob";
    case Action::kListServers:
      return "ListServers";
  }
  return "?";
}

std::string RoleName(petra::v1::Role role) {
  switch (role) {
    case petra::v1::ROLE_ADMIN:
      return "admin";
    case petra::v1::ROLE_MEMBER:
      return "member";
    case petra::v1::ROLE_VIEWER:
      return "viewer";
    default:
      return "unspecified";
  }
}

AccessControl AccessControl::Open() { return AccessControl(); }

AccessControl AccessControl::SingleToken(const std::string& token) {
  AccessControl a;
  if (!token.empty()) {
    a.users_[token] = Principal{kSingleTokenUser, petra::v1::ROLE_ADMIN};
  }
  return a;
}

absl::StatusOr<AccessControl> AccessControl::FromConfig(
    const petra::v1::UsersConfig& config, const std::string& source) {
  if (config.users().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        ": no users (give at least one admin: users { name: \"ada\" "
        "role: ROLE_ADMIN token: \"...\" })"));
  }
  AccessControl a;
  std::set<std::string> names;
  for (int i = 0; i < config.users_size(); ++i) {
    const petra::v1::User& u = config.users(i);
    const std::string where = absl::StrCat(source, ": users[", i, "]");
    if (!ValidName(u.name())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": name \"", u.name(), "\" must be 1 to ",
                       kMaxNameLength, " letters, digits or ._@-"));
    }
    if (!names.insert(u.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": name \"", u.name(), "\" is given twice"));
    }
    if (u.role() != petra::v1::ROLE_ADMIN &&
        u.role() != petra::v1::ROLE_MEMBER &&
        u.role() != petra::v1::ROLE_VIEWER) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " (", u.name(),
          "): role must be ROLE_ADMIN, ROLE_MEMBER or ROLE_VIEWER"));
    }
    const std::string what = absl::StrCat(where, " (", u.name(), ")");
    absl::StatusOr<std::string> token = wire::ParseBearerToken(u.token(), what);
    if (!token.ok()) return token.status();
    if (token->size() < kMinTokenLength) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the token is shorter than ", kMinTokenLength,
          " characters, which can be guessed (openssl rand -hex 16 makes "
          "one)"));
    }
    if (a.users_.count(*token) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": its token is also ", a.users_[*token].user,
                       "'s; each user needs a token of its own"));
    }
    a.users_[*token] = Principal{u.name(), u.role()};
  }
  return a;
}

absl::StatusOr<AccessControl> AccessControl::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text =
      base::ReadSmallFile(path, kMaxUsersFileBytes, "a users file");
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("--users-file: cannot read ", text.status().message()));
  }
  petra::v1::UsersConfig config;
  const std::string source = absl::StrCat("--users-file \"", path, "\"");
  if (absl::Status s = base::ParseTextProto(*text, &config, source); !s.ok()) {
    return s;
  }
  return FromConfig(config, source);
}

absl::StatusOr<Principal> AccessControl::Identify(
    const std::optional<std::string>& authorization) const {
  if (open()) return Principal{};
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        "this coordinator requires a bearer token: give the client "
        "--auth-token-file FILE or set PETRA_AUTH_TOKEN");
  }
  const std::optional<std::string> token = wire::BearerTokenOf(*authorization);
  if (!token.has_value()) {
    return absl::UnauthenticatedError(
        "the authorization metadata is not \"Bearer <token>\"");
  }
  // Every token is compared, so the time says nothing of which matched.
  const Principal* found = nullptr;
  for (const auto& [known, who] : users_) {
    if (base::ConstantTimeEquals(*token, known)) found = &who;
  }
  if (found == nullptr) {
    return absl::UnauthenticatedError(
        "the bearer token is not this coordinator's: no user of its "
        "--users-file or --auth-token-file has it (check the client's "
        "--auth-token-file or PETRA_AUTH_TOKEN)");
  }
  return *found;
}

absl::Status AccessControl::Authorize(const Principal& who, Action action,
                                      const std::string& job_id,
                                      const std::string& owner) {
  switch (who.role) {
    case petra::v1::ROLE_ADMIN:
      return absl::OkStatus();
    case petra::v1::ROLE_MEMBER:
      if (Reads(action) || action == Action::kSubmit) return absl::OkStatus();
      if (owner == who.user) return absl::OkStatus();
      return absl::PermissionDeniedError(absl::StrCat(
          "user \"", who.user, "\" (member) may not ", ActionName(action),
          " job \"", job_id, "\" of ",
          owner.empty() ? "no owner" : absl::StrCat("user \"", owner, "\""),
          ": members cancel and export their own jobs only"));
    case petra::v1::ROLE_VIEWER:
      if (Reads(action)) return absl::OkStatus();
      return absl::PermissionDeniedError(absl::StrCat(
          "user \"", who.user, "\" (viewer) may not ", ActionName(action),
          job_id.empty() ? "" : absl::StrCat(" job \"", job_id, "\""),
          ": viewers only read (GetJob, ListJobs, WatchJob, ListServers)"));
    default:
      return absl::PermissionDeniedError(
          absl::StrCat("user \"", who.user, "\" has no role"));
  }
}

absl::Status AccessControl::AuthorizePriority(const Principal& who,
                                              int32_t priority) {
  if (priority <= 0 || who.role == petra::v1::ROLE_ADMIN) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "user \"", who.user, "\" may not submit at priority ", priority,
      ": only admins put a job ahead of the default (0)"));
}

}  // namespace petra::coordinator
