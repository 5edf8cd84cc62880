// Scraping a running `petra train`: every process serves /metrics, and the
// training metrics are there and move while the job runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/integration/probes.h"
#include "tests/integration/subprocess.h"

namespace petra::testing {
namespace {

using ::testing::HasSubstr;

const std::string kPetra = std::string(PETRA_BIN_DIR) + "/petra";

// Sample name with labels -> value, from the text exposition format.
std::map<std::string, double> Parse(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::atof(line.c_str() + space + 1);
  }
  return out;
}

double Sum(const std::map<std::string, double>& m, const std::string& prefix) {
  double s = 0;
  for (const auto& [name, v] : m) {
    if (name.rfind(prefix, 0) == 0) s += v;
  }
  return s;
}

// The /metrics ports `petra train` prints: coordinator, stage 0, stage 1.
std::vector<int> MetricsPorts(Subprocess& train) {
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) {
    ports.push_back(NumberAfter(train.WaitForLine("metrics: "), "127.0.0.1:"));
  }
  return ports;
}

TEST(Metrics, EveryProcessOfARunningJobExportsMovingTrainingMetrics) {
  Subprocess train(
      kPetra, {"train", "--dataset", "synthetic", "--width", "0.125",
               "--stages", "2", "--epochs", "100", "--grad-diagnostics", "5",
               // Small enough that every step is clipped.
               "--clip-grad-norm", "1e-6"});
  const std::vector<int> ports = MetricsPorts(train);
  for (int p : ports) ASSERT_GT(p, 0) << train.out() << train.err();
  ASSERT_THAT(train.WaitForLine("epoch 1/100 ["), HasSubstr("step"));
  auto scrape = [&] {
    std::vector<std::map<std::string, double>> all;
    for (int p : ports) all.push_back(Parse(HttpGet(p, "/metrics")));
    return all;
  };
  const auto before = scrape();
  std::this_thread::sleep_for(std::chrono::seconds(4));
  const auto after = scrape();

  const auto& coordinator = after[0];
  for (const char* name :
       {"petra_build_info{", "petra_job_info{architecture=\"revnet18\"",
        "petra_job_loss{job_id=", "petra_job_accuracy_ratio{job_id=",
        "petra_job_epoch{job_id=", "petra_job_optimizer_steps{job_id=",
        "petra_job_learning_rate{job_id=", "petra_job_train_samples_total",
        "petra_jobs{state=\"running\"}"}) {
    EXPECT_GT(Sum(coordinator, name), 0) << name;
  }
  // The job's identity: its series join petra_job_info on job_id.
  std::string job_label;
  for (const auto& [series, value] : coordinator) {
    if (series.rfind("petra_job_info{", 0) != 0) continue;
    EXPECT_THAT(series, HasSubstr("mode=\"petra\""));
    const size_t at = series.find("job_id=\"");
    ASSERT_NE(at, std::string::npos) << series;
    job_label = series.substr(at, series.find('"', at + 8) + 1 - at);
  }
  ASSERT_FALSE(job_label.empty());
  EXPECT_GT(Sum(coordinator, "petra_job_optimizer_steps{" + job_label), 0);
  EXPECT_GT(Sum(after[0], "petra_job_train_samples_total"),
            Sum(before[0], "petra_job_train_samples_total"));
  EXPECT_GT(Sum(after[0], "petra_job_optimizer_steps"),
            Sum(before[0], "petra_job_optimizer_steps"));
  // The feed: micro-batches sent, and what it waited for (credits, here:
  // synthetic data is ready at once, the fleet is what paces it).
  EXPECT_GT(Sum(after[0], "petra_feed_micro_batches_total"),
            Sum(before[0], "petra_feed_micro_batches_total"));
  EXPECT_GT(
      Sum(after[0], "petra_feed_wait_seconds_total{waiting_for=\"credits\"}"),
      Sum(before[0], "petra_feed_wait_seconds_total{waiting_for=\"credits\"}"));
  EXPECT_EQ(
      after[0].count("petra_feed_wait_seconds_total{waiting_for=\"data\"}"),
      1u);
  EXPECT_EQ(after[0].count("petra_feed_ready_micro_batches"), 1u);

  for (int j = 0; j < 2; ++j) {
    const auto& b = before[j + 1];
    const auto& a = after[j + 1];
    const std::string stage = "stage=\"" + std::to_string(j) + "\"";
    for (const std::string& moving :
         {"petra_stage_samples_total{direction=\"forward\"," + stage,
          "petra_stage_samples_total{direction=\"backward\"," + stage,
          "petra_stage_micro_batches_total{direction=\"forward\"," + stage,
          "petra_stage_compute_seconds_count{direction=\"forward\"," + stage,
          "petra_stage_compute_seconds_count{direction=\"backward\"," + stage,
          "petra_stage_staleness_steps_count{" + stage,
          "petra_stage_delay_ticks_count{" + stage,
          "petra_stage_optimizer_steps{" + stage,
          "petra_stage_clipped_optimizer_steps{" + stage}) {
      EXPECT_GT(Sum(a, moving), Sum(b, moving)) << moving;
    }
    EXPECT_GT(Sum(a, "petra_stage_learning_rate{" + stage), 0);
    EXPECT_GT(Sum(a, "petra_stage_gradient_norm{" + stage), 1e-6);
    const std::string sent =
        j == 0 ? "petra_stage_stream_sent_bytes_total{stream=\"forward\","
                 "transport=\""
               : "petra_stage_stream_sent_bytes_total{stream=\"backward\","
                 "transport=\"";
    const std::string received =
        j == 0 ? "petra_stage_stream_received_bytes_total{stream=\"backward\"}"
               : "petra_stage_stream_received_bytes_total{stream=\"forward\"}";
    EXPECT_GT(Sum(a, sent), Sum(b, sent)) << sent << " stage " << j;
    EXPECT_GT(Sum(a, received), Sum(b, received)) << received << " stage " << j;
    // Both stages wait for their neighbour, and both hand outputs on.
    EXPECT_GT(Sum(a, "petra_stage_idle_seconds_total{" + stage), 0);
    EXPECT_GT(Sum(a, "petra_stage_send_seconds_total{" + stage), 0);
    for (const char* kind : {"parameters", "optimizer_state", "process_rss"}) {
      EXPECT_GT(Sum(a, "petra_stage_memory_bytes{kind=\"" + std::string(kind) +
                           "\"," + stage),
                0)
          << kind;
    }
    // The allocator's kinds are there, and 0 on the CPU.
    for (const char* kind : {"device", "device_reserved", "device_peak"}) {
      const std::string series = "petra_stage_memory_bytes{kind=\"" +
                                 std::string(kind) + "\"," + stage;
      const auto it = a.lower_bound(series);
      EXPECT_TRUE(it != a.end() && it->first.rfind(series, 0) == 0) << series;
      EXPECT_EQ(Sum(a, series), 0) << kind;
    }
    EXPECT_THAT(HttpGet(ports[j + 1], "/metrics"),
                HasSubstr("petra_stage_in_flight_micro_batches{" + stage));
  }

  // --grad-diagnostics: stage 0 compares its gradient with the exact one.
  const double cosine =
      Sum(after[1],
          "petra_stage_grad_cosine_similarity{reference=\"delayed\","
          "stage=\"0\"}");
  EXPECT_GT(cosine, 0);
  EXPECT_LE(cosine, 1.0 + 1e-6);
  EXPECT_GT(Sum(after[1],
                "petra_stage_grad_norm_ratio{reference=\"delayed\","
                "stage=\"0\"}"),
            0);

  // Every metric the dashboard's queries and the alert rules name is
  // exported by some process.
  std::string exported;
  for (int p : ports) exported += HttpGet(p, "/metrics");
  std::ifstream in(std::string(PETRA_SOURCE_DIR) +
                   "/deploy/grafana/dashboards/petra-fleet.json");
  std::string dashboard((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(dashboard.empty());
  std::ifstream rules_in(std::string(PETRA_SOURCE_DIR) +
                         "/deploy/prometheus/alerts.yml");
  const std::string rules((std::istreambuf_iterator<char>(rules_in)), {});
  ASSERT_FALSE(rules.empty());
  // The rules' expressions, as the dashboard's are found.
  const std::regex rule_expr("expr: ([^\n]*\n)(( {10,}[^\n]*\n)*)");
  for (auto e = std::sregex_iterator(rules.begin(), rules.end(), rule_expr);
       e != std::sregex_iterator(); ++e) {
    std::string text = e->str();
    for (char& c : text) {
      if (c == '"' || c == '\\' || c == '\n') c = ' ';
    }
    dashboard += "\"expr\": \"" + text + "\"";
  }
  const std::regex expr("\"expr\": \"([^\"\\\\]|\\\\.)*\"");
  const std::regex metric("petra_[a-z_]+");
  int names = 0;
  for (auto e = std::sregex_iterator(dashboard.begin(), dashboard.end(), expr);
       e != std::sregex_iterator(); ++e) {
    const std::string text = e->str();
    for (auto m = std::sregex_iterator(text.begin(), text.end(), metric);
         m != std::sregex_iterator(); ++m) {
      std::string name = m->str();
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s = suffix;
        if (name.size() > s.size() &&
            name.compare(name.size() - s.size(), s.size(), s) == 0 &&
            name.find("_total") == std::string::npos) {
          name.resize(name.size() - s.size());
        }
      }
      EXPECT_THAT(exported, HasSubstr("# TYPE " + name + " "))
          << "the dashboard or an alert queries " << name;
      ++names;
    }
  }
  EXPECT_GT(names, 22);
  EXPECT_EQ(train.SignalAndWait(SIGINT, std::chrono::seconds(30)), 130);
}

// Debian's Prometheus scrapes a running job; its query API sees every
// stage's throughput above zero. promtool finds nothing wrong with what
// each process exports.
TEST(Metrics, PrometheusScrapesEveryStageAndPromtoolAcceptsTheOutput) {
  Subprocess train(kPetra, {"train", "--dataset", "synthetic", "--width",
                            "0.125", "--stages", "2", "--epochs", "100"});
  const std::vector<int> ports = MetricsPorts(train);
  for (int p : ports) ASSERT_GT(p, 0) << train.out() << train.err();

  TempDir dir;
  for (size_t i = 0; i < ports.size(); ++i) {
    const std::string file = dir.path() + "/scrape-" + std::to_string(i);
    std::ofstream(file) << HttpGet(ports[i], "/metrics");
    RunResult check = RunToExit(
        "/bin/sh", {"-c", "/usr/bin/promtool check metrics < " + file});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    EXPECT_EQ(check.out + check.err, "") << "process " << i;
  }

  std::string targets;
  for (int p : ports) {
    targets += (targets.empty() ? "'" : ", '") + std::string("127.0.0.1:") +
               std::to_string(p) + "'";
  }
  std::ofstream(dir.path() + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n"
      << "scrape_configs:\n  - job_name: petra\n    static_configs:\n"
      << "      - targets: [" << targets << "]\n";
  const int port = UnusedLoopbackPort();
  Subprocess prometheus(
      "/usr/bin/prometheus",
      {"--config.file=" + dir.path() + "/prometheus.yml",
       "--storage.tsdb.path=" + dir.path() + "/data",
       "--web.listen-address=127.0.0.1:" + std::to_string(port)});
  // sum by (stage) (rate(petra_stage_samples_total[5s])), URL-encoded.
  const std::string query =
      "/api/v1/query?query=sum%20by%20(stage)%20(rate("
      "petra_stage_samples_total%5B5s%5D))";
  const std::regex sample(
      "\"stage\":\"([0-9]+)\"\\},\"value\":\\[[0-9.]+,\"([^\"]+)\"");
  std::map<std::string, double> rate;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string answer;
  while (std::chrono::steady_clock::now() < end && rate.size() < 2) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    answer = HttpGet(port, query);
    rate.clear();
    for (auto m = std::sregex_iterator(answer.begin(), answer.end(), sample);
         m != std::sregex_iterator(); ++m) {
      if (std::atof((*m)[2].str().c_str()) > 0) {
        rate[(*m)[1].str()] = std::atof((*m)[2].str().c_str());
      }
    }
  }
  EXPECT_GT(rate["0"], 0) << answer;
  EXPECT_GT(rate["1"], 0) << answer;
  EXPECT_EQ(train.SignalAndWait(SIGINT, std::chrono::seconds(30)), 130);
}

}  // namespace
}  // namespace petra::testing
