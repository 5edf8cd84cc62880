#include "coordinator/coordinator_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "services/job/enum_names.h"
#include "services/metrics/error_codes.h"

namespace petra::coordinator {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;

struct CoordinatorMetrics::Families {
  explicit Families(prometheus::Registry& r)
      : loss(prometheus::BuildGauge()
                 .Name("petra_job_loss")
                 .Help("Mean loss of the running job: the current epoch's "
                       "training loss, the last evaluation's test loss")
                 .Register(r)),
        accuracy(prometheus::BuildGauge()
                     .Name("petra_job_accuracy_ratio")
                     .Help("Accuracy of the running job, in [0, 1], by split")
                     .Register(r)),
        epoch(prometheus::BuildGauge()
                  .Name("petra_job_epoch")
                  .Help("Epoch the running job is in (1-based)")
                  .Register(r)),
        step(prometheus::BuildGauge()
                 .Name("petra_job_optimizer_steps")
                 .Help("Optimizer steps the running job has taken")
                 .Register(r)),
        lr(prometheus::BuildGauge()
               .Name("petra_job_learning_rate")
               .Help("Learning rate of the running job's last step")
               .Register(r)),
        samples(prometheus::BuildCounter()
                    .Name("petra_job_train_samples_total")
                    .Help("Training samples completed (loss reported by the "
                          "last stage), over all jobs; a language model's "
                          "are its sequences")
                    .Register(r)),
        tokens(prometheus::BuildCounter()
                   .Name("petra_job_train_tokens_total")
                   .Help("Training tokens completed by language models "
                         "(loss reported by the last stage), over all jobs")
                   .Register(r)
                   .Add({})),
        jobs(prometheus::BuildGauge()
                 .Name("petra_jobs")
                 .Help("Jobs the coordinator knows, by state")
                 .Register(r)),
        errors(prometheus::BuildCounter()
                   .Name("petra_coordinator_rpc_errors_total")
                   .Help("Errors the coordinator returned to clients, by "
                         "gRPC code")
                   .Register(r)),
        recoveries(prometheus::BuildCounter()
                       .Name("petra_job_recoveries_total")
                       .Help("Times a running job began recovering, over "
                             "all jobs: it lost a stage server, or this "
                             "coordinator took it over after its "
                             "predecessor stopped or crashed")
                       .Register(r)
                       .Add({})),
        feed_wait(
            prometheus::BuildCounter()
                .Name("petra_feed_wait_seconds_total")
                .Help("Time the data feed spent, by what it waited for: "
                      "data (the next micro-batch's images decoded and "
                      "augmented: the feed is behind) or credits (stage 0 "
                      "had not taken the last ones: the fleet is behind)")
                .Register(r)),
        feed_batches(prometheus::BuildCounter()
                         .Name("petra_feed_micro_batches_total")
                         .Help("Micro-batches the data feed sent to stage 0")
                         .Register(r)
                         .Add({})),
        feed_ready(prometheus::BuildGauge()
                       .Name("petra_feed_ready_micro_batches")
                       .Help("Micro-batches of an image folder decoded ahead "
                             "and waiting for the feed (0 while it waits for "
                             "data)")
                       .Register(r)
                       .Add({})),
        checkpoint_failures(
            prometheus::BuildCounter()
                .Name("petra_job_checkpoint_failures_total")
                .Help("Checkpoints of running jobs that could not be "
                      "written, over all jobs")
                .Register(r)
                .Add({})),
        stage_servers(prometheus::BuildGauge()
                          .Name("petra_job_stage_servers")
                          .Help("Stage servers each running job holds "
                                "(jobs run at once on disjoint servers)")
                          .Register(r)),
        info(prometheus::BuildGauge()
                 .Name("petra_job_info")
                 .Help("1 for each running job, labelled with its id, name, "
                       "architecture and training mode (join the petra_job_* "
                       "series on job_id)")
                 .Register(r)) {}
  Family<Gauge>& loss;
  Family<Gauge>& accuracy;
  Family<Gauge>& epoch;
  Family<Gauge>& step;
  Family<Gauge>& lr;
  Family<Counter>& samples;
  Counter& tokens;
  Family<Gauge>& jobs;
  Family<Counter>& errors;
  Counter& recoveries;
  Family<Counter>& feed_wait;
  Counter& feed_batches;
  Gauge& feed_ready;
  Counter& checkpoint_failures;
  Family<Gauge>& stage_servers;
  Family<Gauge>& info;
};

// A running job's series, to remove when it ends.
struct CoordinatorMetrics::JobSeries {
  std::vector<std::pair<Family<Gauge>*, Gauge*>> gauges;
  Gauge& Add(Family<Gauge>& family, prometheus::Labels labels) {
    Gauge& g = family.Add(labels);
    for (const auto& [f, known] : gauges) {
      if (known == &g) return g;
    }
    gauges.emplace_back(&family, &g);
    return g;
  }
};

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry* registry)
    : f_(registry == nullptr ? nullptr
                             : std::make_unique<Families>(*registry)) {
  if (f_) {
    metrics::AddErrorCodes(f_->errors);
    for (const char* what : {"data", "credits"}) {
      f_->feed_wait.Add({{"waiting_for", what}});
    }
  }
}

CoordinatorMetrics::~CoordinatorMetrics() = default;

void CoordinatorMetrics::JobStarted(const std::string& job_id,
                                    const petra::v1::JobSpec& spec) {
  if (!f_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto& series = jobs_[job_id];
  if (series == nullptr) series = std::make_unique<JobSeries>();
  series
      ->Add(f_->info,
            {{"job_id", job_id},
             {"name", spec.name().empty() ? job_id : spec.name()},
             {"architecture", job::EnumShortName(spec.model().architecture())},
             {"mode", job::EnumShortName(spec.training().mode())}})
      .Set(1);
}

void CoordinatorMetrics::Progress(const std::string& job_id,
                                  const petra::v1::Progress& p) {
  if (!f_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto& series = jobs_[job_id];
  if (series == nullptr) series = std::make_unique<JobSeries>();
  JobSeries& j = *series;
  j.Add(f_->loss, {{"job_id", job_id}, {"split", "train"}}).Set(p.train_loss());
  j.Add(f_->accuracy, {{"job_id", job_id}, {"split", "train"}})
      .Set(p.train_accuracy());
  if (p.has_test_accuracy()) {
    j.Add(f_->accuracy, {{"job_id", job_id}, {"split", "test"}})
        .Set(p.test_accuracy());
    j.Add(f_->loss, {{"job_id", job_id}, {"split", "test"}}).Set(p.test_loss());
  }
  j.Add(f_->epoch, {{"job_id", job_id}}).Set(p.epoch());
  j.Add(f_->step, {{"job_id", job_id}}).Set(static_cast<double>(p.step()));
  j.Add(f_->lr, {{"job_id", job_id}}).Set(p.learning_rate());
}

void CoordinatorMetrics::JobServers(const std::string& job_id, int servers) {
  if (!f_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto& series = jobs_[job_id];
  if (series == nullptr) series = std::make_unique<JobSeries>();
  series->Add(f_->stage_servers, {{"job_id", job_id}}).Set(servers);
}

void CoordinatorMetrics::JobEnded(const std::string& job_id) {
  if (!f_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  for (const auto& [family, gauge] : it->second->gauges) {
    family->Remove(gauge);
  }
  jobs_.erase(it);
}

void CoordinatorMetrics::CheckpointFailed() {
  if (f_) f_->checkpoint_failures.Increment();
}

void CoordinatorMetrics::TrainSamples(int64_t samples, int64_t tokens) {
  if (!f_) return;
  f_->samples.Add({}).Increment(static_cast<double>(samples));
  if (tokens > 0) f_->tokens.Increment(static_cast<double>(tokens));
}

void CoordinatorMetrics::JobStates(
    const std::vector<petra::v1::JobState>& states) {
  if (!f_) return;
  std::map<petra::v1::JobState, int> counts;
  for (int s = petra::v1::JobState_MIN + 1; s <= petra::v1::JobState_MAX; ++s) {
    counts[static_cast<petra::v1::JobState>(s)] = 0;
  }
  for (petra::v1::JobState s : states) ++counts[s];
  for (const auto& [state, n] : counts) {
    std::string name = petra::v1::JobState_Name(state).substr(10);
    f_->jobs.Add({{"state", absl::AsciiStrToLower(name)}}).Set(n);
  }
}

void CoordinatorMetrics::Recovery() {
  if (f_) f_->recoveries.Increment();
}

void CoordinatorMetrics::Fed(double data_wait_seconds,
                             double credit_wait_seconds, int64_t ready) {
  if (!f_) return;
  f_->feed_wait.Add({{"waiting_for", "data"}}).Increment(data_wait_seconds);
  f_->feed_wait.Add({{"waiting_for", "credits"}})
      .Increment(credit_wait_seconds);
  f_->feed_batches.Increment();
  f_->feed_ready.Set(static_cast<double>(ready));
}

void CoordinatorMetrics::Error(absl::StatusCode code) {
  if (!f_) return;
  f_->errors.Add(metrics::ErrorCodeLabel(code)).Increment();
}

}  // namespace petra::coordinator
