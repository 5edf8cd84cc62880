// Users, tokens and roles: every role against every call, on its own jobs
// and another's, and the users file's checks.
#include "coordinator/access_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace petra::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr char kAdaToken[] = "ada-0123456789abcdef";
constexpr char kBoToken[] = "bo-0123456789abcdef";
constexpr char kViToken[] = "vi-0123456789abcdef";

petra::v1::UsersConfig Config() {
  petra::v1::UsersConfig c;
  auto add = [&](const char* name, petra::v1::Role role, const char* token) {
    petra::v1::User* u = c.add_users();
    u->set_name(name);
    u->set_role(role);
    u->set_token(token);
  };
  add("ada", petra::v1::ROLE_ADMIN, kAdaToken);
  add("bo", petra::v1::ROLE_MEMBER, kBoToken);
  add("vi", petra::v1::ROLE_VIEWER, kViToken);
  return c;
}

std::string Bearer(const std::string& token) { return "Bearer " + token; }

TEST(AccessControl, TokensNameTheirUsers) {
  absl::StatusOr<AccessControl> a = AccessControl::FromConfig(Config(), "f");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->open());
  EXPECT_EQ(a->user_count(), 3);
  absl::StatusOr<Principal> bo = a->Identify(Bearer(kBoToken));
  ASSERT_TRUE(bo.ok());
  EXPECT_EQ(bo->user, "bo");
  EXPECT_EQ(bo->role, petra::v1::ROLE_MEMBER);
  EXPECT_EQ(a->Identify(std::string("bearer ") + kViToken)->user, "vi");
  for (const std::string& bad :
       {Bearer("nope"), Bearer(std::string(kBoToken) + "x"),
        std::string("Basic ") + kBoToken, Bearer("")}) {
    absl::StatusOr<Principal> p = a->Identify(bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
  EXPECT_THAT(a->Identify(std::nullopt).status().message(),
              HasSubstr("requires a bearer token"));
}

TEST(AccessControl, OpenAndSingleToken) {
  AccessControl open = AccessControl::Open();
  EXPECT_TRUE(open.open());
  absl::StatusOr<Principal> anyone = open.Identify(std::nullopt);
  ASSERT_TRUE(anyone.ok());
  EXPECT_EQ(anyone->user, "");
  EXPECT_EQ(anyone->role, petra::v1::ROLE_ADMIN);

  // The single --auth-token-file: one admin called "admin".
  AccessControl one = AccessControl::SingleToken("s3cret");
  EXPECT_EQ(one.Identify(Bearer("s3cret"))->user, "admin");
  EXPECT_EQ(one.Identify(Bearer("s3cret"))->role, petra::v1::ROLE_ADMIN);
  EXPECT_EQ(one.Identify(Bearer("s3creT")).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(one.Identify(std::nullopt).status().code(),
            absl::StatusCode::kUnauthenticated);
}

// Every role x every call, on the caller's own job and on another's.
TEST(AccessControl, EveryRoleOnEveryCall) {
  const Principal ada{"ada", petra::v1::ROLE_ADMIN},
      bo{"bo", petra::v1::ROLE_MEMBER}, vi{"vi", petra::v1::ROLE_VIEWER};
  struct Want {
    Action action;
    bool admin, member_own, member_other, viewer;
  };
  const Want table[] = {
      {Action::kSubmit, true, true, true, false},
      {Action::kGet, true, true, true, true},
      {Action::kList, true, true, true, true},
      {Action::kWatch, true, true, true, true},
      {Action::kCancel, true, true, false, false},
      {Action::kExport, true, true, false, false},
      {Action::kListServers, true, true, true, true},
  };
  for (const Want& w : table) {
    SCOPED_TRACE(ActionName(w.action));
    EXPECT_EQ(AccessControl::Authorize(ada, w.action, "job-1", "bo").ok(),
              w.admin);
    EXPECT_EQ(AccessControl::Authorize(bo, w.action, "job-1", "bo").ok(),
              w.member_own);
    absl::Status other = AccessControl::Authorize(bo, w.action, "job-2", "cy");
    EXPECT_EQ(other.ok(), w.member_other);
    if (!other.ok()) {
      EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
      EXPECT_THAT(other.message(), HasSubstr("user \"bo\" (member) may not " +
                                             std::string(ActionName(w.action)) +
                                             " job \"job-2\" of user \"cy\""));
    }
    absl::Status viewer = AccessControl::Authorize(vi, w.action, "job-1", "vi");
    EXPECT_EQ(viewer.ok(), w.viewer);
    if (!viewer.ok()) {
      EXPECT_EQ(viewer.code(), absl::StatusCode::kPermissionDenied);
      EXPECT_THAT(viewer.message(), HasSubstr("user \"vi\" (viewer) may not"));
    }
  }
}

TEST(AccessControl, OnlyAdminsSubmitAheadOfTheDefaultPriority) {
  const Principal ada{"ada", petra::v1::ROLE_ADMIN},
      bo{"bo", petra::v1::ROLE_MEMBER};
  EXPECT_TRUE(AccessControl::AuthorizePriority(ada, 100).ok());
  EXPECT_TRUE(AccessControl::AuthorizePriority(bo, 0).ok());
  EXPECT_TRUE(AccessControl::AuthorizePriority(bo, -5).ok());
  const absl::Status s = AccessControl::AuthorizePriority(bo, 3);
  EXPECT_TRUE(absl::IsPermissionDenied(s));
  EXPECT_THAT(s.message(),
              HasSubstr("user \"bo\" may not submit at priority 3"));
}

TEST(AccessControl, BadUsersAreRefusedNamingTheEntry) {
  struct Case {
    std::function<void(petra::v1::UsersConfig&)> mutate;
    std::string message;
  };
  const Case cases[] = {
      {[](auto& c) { c.clear_users(); }, "no users"},
      {[](auto& c) { c.mutable_users(1)->set_name("b o"); },
       "users[1]: name \"b o\" must be"},
      {[](auto& c) { c.mutable_users(1)->set_name("ada"); },
       "users[1]: name \"ada\" is given twice"},
      {[](auto& c) { c.mutable_users(2)->clear_role(); },
       "users[2] (vi): role must be"},
      {[](auto& c) { c.mutable_users(2)->set_token("short-token"); },
       "users[2] (vi): the token is shorter than 16"},
      {[](auto& c) { c.mutable_users(2)->set_token(kBoToken); },
       "its token is also bo's"},
      {[](auto& c) { c.mutable_users(0)->set_token("with space 0123456789"); },
       "printable ASCII without spaces"},
  };
  for (const Case& c : cases) {
    petra::v1::UsersConfig config = Config();
    c.mutate(config);
    absl::StatusOr<AccessControl> a = AccessControl::FromConfig(config, "F");
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument)
        << c.message;
    EXPECT_THAT(a.status().message(), HasSubstr(c.message));
  }
}

TEST(AccessControl, ReadsATextProtoFile) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            absl::StrCat("petra-users-", ::getpid(), ".txtpb"))
                               .string();
  std::ofstream(path) << "users { name: \"ada\" role: ROLE_ADMIN token: \""
                      << kAdaToken << "\" }\n";
  absl::StatusOr<AccessControl> a = AccessControl::FromFile(path);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->Identify(Bearer(kAdaToken))->user, "ada");

  std::ofstream(path) << "users { name: \"ada\" rol: ROLE_ADMIN }\n";
  a = AccessControl::FromFile(path);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("line 1, column"));
  EXPECT_THAT(a.status().message(), HasSubstr(path));
  std::remove(path.c_str());
  a = AccessControl::FromFile(path);
  EXPECT_THAT(a.status().message(), HasSubstr("--users-file: cannot read"));
}

}  // namespace
}  // namespace petra::coordinator
