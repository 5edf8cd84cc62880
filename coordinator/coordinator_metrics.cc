#include "coordinator/coordinator_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

#include "absl/strings/ascii.h"
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
                          "last stage), over all jobs")
                    .Register(r)),
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
                       .Help("Times a running job lost a stage server and "
                             "began recovering, over all jobs")
                       .Register(r)
                       .Add({})) {}
  Family<Gauge>& loss;
  Family<Gauge>& accuracy;
  Family<Gauge>& epoch;
  Family<Gauge>& step;
  Family<Gauge>& lr;
  Family<Counter>& samples;
  Family<Gauge>& jobs;
  Family<Counter>& errors;
  Counter& recoveries;
};

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry* registry)
    : f_(registry == nullptr ? nullptr
                             : std::make_unique<Families>(*registry)) {
  if (f_) metrics::AddErrorCodes(f_->errors);
}

CoordinatorMetrics::~CoordinatorMetrics() = default;

void CoordinatorMetrics::Progress(const petra::v1::Progress& p) {
  if (!f_) return;
  f_->loss.Add({{"split", "train"}}).Set(p.train_loss());
  f_->accuracy.Add({{"split", "train"}}).Set(p.train_accuracy());
  if (p.has_test_accuracy()) {
    f_->accuracy.Add({{"split", "test"}}).Set(p.test_accuracy());
    f_->loss.Add({{"split", "test"}}).Set(p.test_loss());
  }
  f_->epoch.Add({}).Set(p.epoch());
  f_->step.Add({}).Set(static_cast<double>(p.step()));
  f_->lr.Add({}).Set(p.learning_rate());
}

void CoordinatorMetrics::TrainSamples(int64_t samples) {
  if (!f_) return;
  f_->samples.Add({}).Increment(static_cast<double>(samples));
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

void CoordinatorMetrics::Error(absl::StatusCode code) {
  if (!f_) return;
  f_->errors.Add(metrics::ErrorCodeLabel(code)).Increment();
}

}  // namespace petra::coordinator
