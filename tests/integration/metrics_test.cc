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

TEST(Metrics, EveryProcessOfARunningJobExportsMovingTrainingMetrics) {
  Subprocess train(kPetra, {"train", "--dataset", "synthetic", "--width",
                            "0.125", "--stages", "2", "--epochs", "100"});
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) {
    const std::string line = train.WaitForLine("metrics: ");
    ports.push_back(NumberAfter(line, "127.0.0.1:"));
    ASSERT_GT(ports.back(), 0) << train.out() << train.err();
  }
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
       {"petra_build_info{", "petra_job_loss{split=\"train\"}",
        "petra_job_accuracy_ratio{split=\"train\"}", "petra_job_epoch",
        "petra_job_optimizer_steps", "petra_job_learning_rate",
        "petra_job_train_samples_total", "petra_jobs{state=\"running\"}"}) {
    EXPECT_GT(Sum(coordinator, name), 0) << name;
  }
  EXPECT_GT(Sum(after[0], "petra_job_train_samples_total"),
            Sum(before[0], "petra_job_train_samples_total"));
  EXPECT_GT(Sum(after[0], "petra_job_optimizer_steps"),
            Sum(before[0], "petra_job_optimizer_steps"));

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
          "petra_stage_optimizer_steps{" + stage}) {
      EXPECT_GT(Sum(a, moving), Sum(b, moving)) << moving;
    }
    const std::string sent = j == 0 ? "petra_stage_stream_sent_bytes_total{stream=\"forward\"}"
                                    : "petra_stage_stream_sent_bytes_total{stream=\"backward\"}";
    const std::string received = j == 0 ? "petra_stage_stream_received_bytes_total{stream=\"backward\"}"
                                        : "petra_stage_stream_received_bytes_total{stream=\"forward\"}";
    EXPECT_GT(Sum(a, sent), Sum(b, sent)) << sent << " stage " << j;
    EXPECT_GT(Sum(a, received), Sum(b, received)) << received << " stage " << j;
    EXPECT_GT(Sum(a, "petra_stage_input_wait_seconds_total{"), 0);
    for (const char* kind :
         {"parameters", "optimizer_state", "process_rss"}) {
      EXPECT_GT(Sum(a, "petra_stage_memory_bytes{kind=\"" + std::string(kind) +
                           "\"," + stage),
                0)
          << kind;
    }
    EXPECT_THAT(HttpGet(ports[j + 1], "/metrics"),
                HasSubstr("petra_stage_in_flight_micro_batches{" + stage));
  }

  // Every metric the dashboard's queries name is exported by some process.
  std::string exported;
  for (int p : ports) exported += HttpGet(p, "/metrics");
  std::ifstream in(std::string(PETRA_SOURCE_DIR) +
                   "/deploy/grafana/dashboards/petra-fleet.json");
  const std::string dashboard((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(dashboard.empty());
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
          << "the dashboard queries " << name;
      ++names;
    }
  }
  EXPECT_GT(names, 15);
  EXPECT_EQ(train.SignalAndWait(SIGINT, std::chrono::seconds(30)), 130);
}

}  // namespace
}  // namespace petra::testing
