// The /metrics web configuration: Prometheus' YAML read and checked, and
// basic auth against bcrypt hashes.
#include "services/metrics/web_config.h"

#include <crypt.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "services/base/paths.h"

namespace petra::metrics {

// A bcrypt hash of `password` (cost 4: fast enough for a test); also
// metrics_exposer_test's.
std::string BcryptForTest(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt)),
            nullptr);
  crypt_data data;
  std::memset(&data, 0, sizeof(data));
  return crypt_r(password.c_str(), salt, &data);
}

namespace {

using ::testing::HasSubstr;

std::string Basic(const std::string& user, const std::string& password) {
  return "Basic " + absl::Base64Escape(user + ":" + password);
}

class WebConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("petra-web-config-", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { base::RemoveTree(dir_).IgnoreError(); }
  std::string Write(const std::string& yaml) {
    const std::string path = (dir_ / "web.yml").string();
    std::ofstream(path) << yaml;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(WebConfigTest, ReadsBasicAuthUsers) {
  const std::string hash = BcryptForTest("pw");
  absl::StatusOr<WebConfig> c =
      ReadWebConfig(Write("basic_auth_users:\n  prometheus: " + hash + "\n"),
                    "--metrics-web-config");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->basic_auth_users.at("prometheus"), hash);
  // No file, and an empty one: nobody is asked for credentials.
  EXPECT_TRUE(ReadWebConfig("", "f")->basic_auth_users.empty());
  EXPECT_TRUE(ReadWebConfig(Write(""), "f")->basic_auth_users.empty());
}

TEST_F(WebConfigTest, WhatItCannotHonourIsRefusedByName) {
  const std::pair<std::string, std::string> cases[] = {
      {"http_server_config:\n  http2: false\n", "http_server_config: not"},
      {"tls_server_config:\n  cert_file: m.crt\n  key_file: m.key\n",
       "tls_server_config: not supported"},
      {"basic_auth_users:\n  prometheus: plaintext\n",
       "basic_auth_users.prometheus: not a bcrypt hash"},
      {"basic_auth_users: [a]\n", "basic_auth_users: expected a mapping"},
      {"- a list\n", "expected a YAML mapping"},
      {"basic_auth_users: [\n", "web.yml"},
  };
  for (const auto& [yaml, message] : cases) {
    absl::StatusOr<WebConfig> c = ReadWebConfig(Write(yaml), "--flag");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(c.status().message(), HasSubstr(message)) << yaml;
    EXPECT_THAT(c.status().message(), HasSubstr("--flag")) << yaml;
  }
  EXPECT_THAT(
      ReadWebConfig((dir_ / "none.yml").string(), "--flag").status().message(),
      HasSubstr("cannot read it"));
}

TEST(BasicAuth, OnlyTheRightPasswordOfAKnownUser) {
  WebConfig c;
  EXPECT_TRUE(BasicAuthAllows(c, nullptr));  // no users: no check
  c.basic_auth_users["prometheus"] = BcryptForTest("s3cret");
  EXPECT_TRUE(BasicAuthAllows(c, Basic("prometheus", "s3cret").c_str()));
  EXPECT_TRUE(BasicAuthAllows(
      c, ("basic " + absl::Base64Escape("prometheus:s3cret")).c_str()));
  for (const std::string& bad :
       {Basic("prometheus", "s3creT"), Basic("grafana", "s3cret"),
        Basic("prometheus", ""), std::string("Bearer s3cret"),
        std::string("Basic !!!"),
        "Basic " + absl::Base64Escape("prometheus")}) {
    EXPECT_FALSE(BasicAuthAllows(c, bad.c_str())) << bad;
  }
  EXPECT_FALSE(BasicAuthAllows(c, nullptr));
}

}  // namespace
}  // namespace petra::metrics
