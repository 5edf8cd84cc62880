#include "services/metrics/metrics_exposer.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"

namespace petra::metrics {

std::string BcryptForTest(const std::string& password);  // web_config_test

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A connection to loopback `port`; -1 when it cannot connect.
int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// One plain HTTP/1.0 GET on loopback; the whole response.
std::string Get(int port, const std::string& path,
                const std::string& headers = "") {
  const int fd = Connect(port);
  if (fd < 0) return "";
  const std::string request =
      "GET " + path + " HTTP/1.0\r\n" + headers + "\r\n";
  if (write(fd, request.data(), request.size()) < 0) {
    close(fd);
    return "";
  }
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) {
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return response;
}

// Only the registry's metrics, NaN spelt as the text format says (the
// exposer of prometheus-cpp printed "Nan" and its own metrics in
// microseconds).
TEST(MetricsExposer, ServesTheRegistryWithNaNSpeltAsTheFormatSays) {
  absl::StatusOr<std::unique_ptr<MetricsExposer>> m =
      MetricsExposer::Start("127.0.0.1:0", "test");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_GT((*m)->port(), 0);
  prometheus::BuildGauge()
      .Name("petra_test_loss")
      .Help("a loss that went wrong")
      .Register((*m)->registry())
      .Add({})
      .Set(std::nan(""));
  const std::string response = Get((*m)->port(), "/metrics");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(response, HasSubstr("\npetra_test_loss NaN\n"));
  EXPECT_THAT(response, HasSubstr("petra_build_info{"));
  EXPECT_THAT(response, Not(HasSubstr("Nan")));
  EXPECT_THAT(response, Not(HasSubstr("exposer_")));
  EXPECT_THAT(Get((*m)->port(), "/other"), HasSubstr("404"));
}

// Two idle connections once held both of civetweb's threads, and every
// scrape waited 30 s, credentials or not.
TEST(MetricsExposer, AHundredIdleConnectionsLeaveAScrapeAnswered) {
  absl::StatusOr<std::unique_ptr<MetricsExposer>> m =
      MetricsExposer::Start("127.0.0.1:0", "test");
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = Connect((*m)->port());  // and sends nothing
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string response = Get((*m)->port(), "/metrics");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_LT(seconds, 1.0);
  // The server drops a connection that sends no request (2 s), so the
  // idle ones cannot keep its threads for long.
  timeval wait{10, 0};
  setsockopt(idle.front(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  char buffer[256];
  const auto before_close = std::chrono::steady_clock::now();
  // Closed (0), perhaps after a 408 reply; -1 would be our 10 s timeout.
  EXPECT_GE(read(idle.front(), buffer, sizeof(buffer)), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - before_close,
            std::chrono::seconds(5));
  for (int fd : idle) close(fd);
}

TEST(MetricsExposer, ABusyAddressIsUnavailableNamingIt) {
  absl::StatusOr<std::unique_ptr<MetricsExposer>> first =
      MetricsExposer::Start("127.0.0.1:0", "test");
  ASSERT_TRUE(first.ok());
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsExposer>> second =
      MetricsExposer::Start(address, "test");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(
      second.status().message(),
      HasSubstr("--metrics-listen: cannot serve metrics on " + address));
}

TEST(MetricsExposer, BasicAuthAsksForCredentials) {
  WebConfig web;
  web.basic_auth_users["prometheus"] = BcryptForTest("pw");
  ASSERT_EQ(web.basic_auth_users["prometheus"].size(), 60u);
  absl::StatusOr<std::unique_ptr<MetricsExposer>> m =
      MetricsExposer::Start("127.0.0.1:0", "test", web);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string none = Get((*m)->port(), "/metrics");
  EXPECT_THAT(none, HasSubstr("401 Unauthorized"));
  EXPECT_THAT(none, HasSubstr("WWW-Authenticate: Basic"));
  EXPECT_THAT(none, Not(HasSubstr("petra_build_info")));
  auto with = [](const std::string& user_password) {
    return "Authorization: Basic " + absl::Base64Escape(user_password) + "\r\n";
  };
  EXPECT_THAT(Get((*m)->port(), "/metrics", with("prometheus:nope")),
              HasSubstr("401"));
  EXPECT_THAT(Get((*m)->port(), "/metrics", with("prometheus:pw")),
              HasSubstr("petra_build_info"));
}

}  // namespace
}  // namespace petra::metrics
