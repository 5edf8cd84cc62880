#include "services/server/server_frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "services/base/paths.h"

namespace petra::server {
namespace {

using ::testing::HasSubstr;

FrameOptions Loopback(const std::string& state_dir) {
  FrameOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.state_dir = state_dir;
  return o;
}

std::string TempDir(const std::string& name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("petra-frame-" + name + "-" + std::to_string(::getpid())))
          .string();
  EXPECT_TRUE(base::RemoveTree(dir).ok());
  return dir;
}

TEST(ServerFrame, RefusesWhatNoServerCouldStartWith) {
  const std::string dir = TempDir("refuse");
  FrameOptions bad_listen = Loopback(dir);
  bad_listen.listen = "nowhere";
  EXPECT_THAT(ServerFrame::Create(bad_listen).status().message(),
              HasSubstr("--listen"));
  FrameOptions bad_metrics = Loopback(dir);
  bad_metrics.metrics_listen = "127.0.0.1:99999";
  EXPECT_THAT(ServerFrame::Create(bad_metrics).status().message(),
              HasSubstr("--metrics-listen"));
  // An identity to check needs client certificates to check it on.
  absl::Status identity =
      ServerFrame::Create(Loopback(dir), "--stage-identity", "stage").status();
  EXPECT_EQ(identity.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(identity.message(), HasSubstr("--stage-identity needs mutual"));
  FrameOptions no_token = Loopback(dir);
  no_token.fleet_token_file = dir + "/missing-token";
  EXPECT_THAT(ServerFrame::Create(no_token).status().message(),
              HasSubstr("--fleet-token-file"));
  FrameOptions file_as_dir = Loopback(dir + "/token-dir");
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/token-dir") << "x"; }
  EXPECT_THAT(ServerFrame::Create(file_as_dir).status().message(),
              HasSubstr("--state-dir"));
  ASSERT_TRUE(base::RemoveTree(dir).ok());
}

TEST(ServerFrame, StartsServesAndStopsOnce) {
  const std::string dir = TempDir("serve");
  absl::StatusOr<std::unique_ptr<ServerFrame>> frame =
      ServerFrame::Create(Loopback(dir));
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << "made when missing";
  EXPECT_EQ((*frame)->registry(), nullptr) << "no /metrics before it starts";
  ASSERT_TRUE((*frame)->StartMetrics("test").ok());
  EXPECT_NE((*frame)->registry(), nullptr);
  EXPECT_GT((*frame)->metrics_port(), 0);
  ASSERT_TRUE((*frame)->StartServing({}).ok());
  EXPECT_TRUE((*frame)->serving());
  EXPECT_GT((*frame)->port(), 0);
  EXPECT_EQ((*frame)->StartServing({}).code(),
            absl::StatusCode::kFailedPrecondition);
  (*frame)->StopAdvertising();
  (*frame)->StopServing();
  EXPECT_FALSE((*frame)->serving());
  (*frame)->StopServing();  // a second stop is nothing
  (*frame)->StopMetrics();
  EXPECT_EQ((*frame)->metrics_port(), 0);
  ASSERT_TRUE(base::RemoveTree(dir).ok());
}

TEST(ServerFrame, NoMetricsAddressServesNoMetrics) {
  const std::string dir = TempDir("nometrics");
  FrameOptions o = Loopback(dir);
  o.metrics_listen.clear();
  absl::StatusOr<std::unique_ptr<ServerFrame>> frame = ServerFrame::Create(o);
  ASSERT_TRUE(frame.ok()) << frame.status();
  ASSERT_TRUE((*frame)->StartMetrics("test").ok());
  EXPECT_EQ((*frame)->registry(), nullptr);
  EXPECT_EQ((*frame)->metrics_port(), 0);
  ASSERT_TRUE(base::RemoveTree(dir).ok());
}

}  // namespace
}  // namespace petra::server
