#include "stage_server/stage_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "services/metrics/error_codes.h"

namespace petra::stage_server {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

struct StageMetrics::Families {
  explicit Families(prometheus::Registry& r)
      : samples(prometheus::BuildCounter()
                    .Name("petra_stage_samples_total")
                    .Help("Training samples a stage computed, by direction")
                    .Register(r)),
        micro_batches(prometheus::BuildCounter()
                          .Name("petra_stage_micro_batches_total")
                          .Help("Training micro-batches a stage computed, by "
                                "direction")
                          .Register(r)),
        compute(prometheus::BuildHistogram()
                    .Name("petra_stage_compute_seconds")
                    .Help("Time a stage's worker spent on one micro-batch, by "
                          "direction")
                    .Register(r)),
        idle(prometheus::BuildCounter()
                 .Name("petra_stage_idle_seconds_total")
                 .Help("Time a stage's training passes waited for the input "
                       "of the next operation with nothing else to run (the "
                       "pipeline's bubble)")
                 .Register(r)),
        send(prometheus::BuildCounter()
                 .Name("petra_stage_send_seconds_total")
                 .Help("Time a stage's training passes spent handing their "
                       "outputs on (queueing them for the links)")
                 .Register(r)),
        staleness(prometheus::BuildHistogram()
                      .Name("petra_stage_staleness_steps")
                      .Help("Optimizer steps between a micro-batch's forward "
                            "and its backward on a stage")
                      .Register(r)),
        delay(prometheus::BuildHistogram()
                  .Name("petra_stage_delay_ticks")
                  .Help("Pipeline ticks between a micro-batch's forward and "
                        "its backward on a stage")
                  .Register(r)),
        in_flight(prometheus::BuildGauge()
                      .Name("petra_stage_in_flight_micro_batches")
                      .Help("Micro-batches a stage has forwarded and not yet "
                            "backwarded")
                      .Register(r)),
        steps(prometheus::BuildGauge()
                  .Name("petra_stage_optimizer_steps")
                  .Help("Optimizer steps a stage has taken in its job")
                  .Register(r)),
        learning_rate(prometheus::BuildGauge()
                          .Name("petra_stage_learning_rate")
                          .Help("Learning rate of a stage's next optimizer "
                                "step: the job's schedule times the stage's "
                                "delay factor (schedule.delay_lr_power)")
                          .Register(r)),
        clipped_steps(prometheus::BuildGauge()
                          .Name("petra_stage_clipped_optimizer_steps")
                          .Help("Optimizer steps of a stage's job whose "
                                "gradient norm was over "
                                "optimizer.clip_grad_norm and scaled down")
                          .Register(r)),
        gradient_norm(prometheus::BuildGauge()
                          .Name("petra_stage_gradient_norm")
                          .Help("Norm of a stage's gradient at its last "
                                "optimizer step, before clipping (0 while "
                                "clipping is off)")
                          .Register(r)),
        staleness_bound(
            prometheus::BuildGauge()
                .Name("petra_stage_staleness_bound_steps")
                .Help("The most optimizer steps a micro-batch can see between "
                      "its forward and backward on a stage, by the schedule: "
                      "ceil(2 (J - 1 - j) / k) for stage j of J")
                .Register(r)),
        memory(prometheus::BuildGauge()
                   .Name("petra_stage_memory_bytes")
                   .Help("Memory a stage holds, by kind")
                   .Register(r)),
        sent(
            prometheus::BuildCounter()
                .Name("petra_stage_stream_sent_bytes_total")
                .Help("Payload bytes a stage sent to its neighbours, by stream "
                      "and by the data channel the tensors went through "
                      "(transport: grpc, grpc_bulk or shm)")
                .Register(r)),
        received(prometheus::BuildCounter()
                     .Name("petra_stage_stream_received_bytes_total")
                     .Help("Payload bytes a stage received from its neighbours "
                           "and the coordinator, messages and data channels "
                           "together, by stream")
                     .Register(r)),
        cosine(prometheus::BuildGauge()
                   .Name("petra_stage_grad_cosine_similarity")
                   .Help("Cosine similarity of the gradient a stage applied "
                         "to a reference: the exact delayed gradient "
                         "(reference=\"delayed\", newest, with "
                         "--grad-diagnostics) or the true end-to-end one "
                         "(reference=\"end_to_end\", mean of the last "
                         "training pass, with --e2e-diagnostics)")
                   .Register(r)),
        norm_ratio(prometheus::BuildGauge()
                       .Name("petra_stage_grad_norm_ratio")
                       .Help("Norm of the gradient a stage applied over its "
                             "reference's (see "
                             "petra_stage_grad_cosine_similarity)")
                       .Register(r)),
        rebuild_error(prometheus::BuildGauge()
                          .Name("petra_stage_rebuild_error_ratio")
                          .Help("||x - x'|| / ||x|| of a stage's input x and "
                                "x' rebuilt from its output with the same "
                                "weights, mean and max of the samples so far "
                                "(training.rebuild_error_every)")
                          .Register(r)),
        allreduce_seconds(
            prometheus::BuildGauge()
                .Name("petra_stage_allreduce_seconds")
                .Help("Seconds a stage of a job with replicas spent averaging "
                      "its gradients (and BN statistics) with its copies in "
                      "the other replicas, in its job so far; 0 without "
                      "replicas")
                .Register(r)),
        allreduce_bytes(prometheus::BuildGauge()
                            .Name("petra_stage_allreduce_bytes")
                            .Help("Bytes a stage all-reduced with its copies "
                                  "in the other replicas, in its job so far")
                            .Register(r)),
        replica_mismatches(
            prometheus::BuildGauge()
                .Name("petra_stage_replica_mismatches")
                .Help("Training passes of a stage's job after which its "
                      "replicas held different weights (each fails the job)")
                .Register(r)),
        refused(prometheus::BuildCounter()
                    .Name("petra_stage_data_refused_total")
                    .Help("Data streams and messages a stage server refused "
                          "before keeping any of their bytes, by stream "
                          "(forward, backward, bulk) and reason "
                          "(unauthenticated: no or a wrong data key; "
                          "over_limit: past a bytes-in-flight limit)")
                    .Register(r)),
        errors(prometheus::BuildCounter()
                   .Name("petra_stage_rpc_errors_total")
                   .Help("Errors a stage server returned for RPCs and stream "
                         "messages, by gRPC code")
                   .Register(r)) {}

  Family<Counter>& samples;
  Family<Counter>& micro_batches;
  Family<Histogram>& compute;
  Family<Counter>& idle;
  Family<Counter>& send;
  Family<Histogram>& staleness;
  Family<Histogram>& delay;
  Family<Gauge>& in_flight;
  Family<Gauge>& steps;
  Family<Gauge>& learning_rate;
  Family<Gauge>& clipped_steps;
  Family<Gauge>& gradient_norm;
  Family<Gauge>& staleness_bound;
  Family<Gauge>& memory;
  Family<Counter>& sent;
  Family<Counter>& received;
  Family<Gauge>& cosine;
  Family<Gauge>& norm_ratio;
  Family<Gauge>& rebuild_error;
  Family<Gauge>& allreduce_seconds;
  Family<Gauge>& allreduce_bytes;
  Family<Gauge>& replica_mismatches;
  Family<Counter>& refused;
  Family<Counter>& errors;
  // The replica label of the stage's job (Idle zeroes its gauges).
  int replica = 0;
};

namespace {

const char* Direction(bool backward) {
  return backward ? "backward" : "forward";
}

const Histogram::BucketBoundaries& SecondsBuckets() {
  static const Histogram::BucketBoundaries b = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return b;
}

const Histogram::BucketBoundaries& CountBuckets() {
  static const Histogram::BucketBoundaries b = {0, 1, 2, 4, 8, 16, 32, 64, 128};
  return b;
}

}  // namespace

StageMetrics::StageMetrics(prometheus::Registry* registry)
    : f_(registry == nullptr ? nullptr
                             : std::make_unique<Families>(*registry)) {
  if (f_) metrics::AddErrorCodes(f_->errors);
}

StageMetrics::~StageMetrics() = default;

void StageMetrics::Computed(int stage, bool backward, int64_t samples,
                            double seconds) {
  if (!f_) return;
  const prometheus::Labels l = {{"stage", absl::StrCat(stage)},
                                {"direction", Direction(backward)}};
  f_->samples.Add(l).Increment(static_cast<double>(samples));
  f_->micro_batches.Add(l).Increment();
  f_->compute.Add(l, SecondsBuckets()).Observe(seconds);
}

void StageMetrics::Staleness(int stage, int64_t delay_ticks,
                             int64_t staleness_steps) {
  if (!f_) return;
  const prometheus::Labels l = {{"stage", absl::StrCat(stage)}};
  f_->staleness.Add(l, CountBuckets())
      .Observe(static_cast<double>(staleness_steps));
  f_->delay.Add(l, CountBuckets()).Observe(static_cast<double>(delay_ticks));
}

void StageMetrics::Idle(int stage, double seconds) {
  if (!f_) return;
  f_->idle.Add({{"stage", absl::StrCat(stage)}}).Increment(seconds);
}

void StageMetrics::Sending(int stage, double seconds) {
  if (!f_) return;
  f_->send.Add({{"stage", absl::StrCat(stage)}}).Increment(seconds);
}

void StageMetrics::State(int stage, int64_t in_flight, int64_t optimizer_steps,
                         const petra::v1::MemoryBreakdown& m) {
  if (!f_) return;
  const std::string s = absl::StrCat(stage);
  f_->in_flight.Add({{"stage", s}}).Set(static_cast<double>(in_flight));
  f_->steps.Add({{"stage", s}}).Set(static_cast<double>(optimizer_steps));
  for (const auto& [kind, bytes] :
       {std::pair{"parameters", m.parameters_bytes()},
        std::pair{"optimizer_state", m.optimizer_state_bytes()},
        std::pair{"activation_buffer", m.activation_buffer_bytes()},
        std::pair{"weight_stash", m.weight_stash_bytes()},
        std::pair{"process_rss", m.process_rss_bytes()},
        std::pair{"device", m.device_bytes()},
        std::pair{"device_reserved", m.device_reserved_bytes()},
        std::pair{"device_peak", m.device_peak_bytes()},
        std::pair{"host_tensors", m.host_tensor_bytes()},
        std::pair{"host_tensors_peak", m.host_tensor_peak_bytes()},
        std::pair{"host_tensors_train_peak",
                  m.host_tensor_train_peak_bytes()}}) {
    f_->memory.Add({{"stage", s}, {"kind", kind}})
        .Set(static_cast<double>(bytes));
  }
}

void StageMetrics::Optimizer(int stage, double learning_rate,
                             int64_t clipped_steps, double gradient_norm) {
  if (!f_) return;
  const prometheus::Labels l = {{"stage", absl::StrCat(stage)}};
  f_->learning_rate.Add(l).Set(learning_rate);
  f_->clipped_steps.Add(l).Set(static_cast<double>(clipped_steps));
  f_->gradient_norm.Add(l).Set(gradient_norm);
}

void StageMetrics::Replicas(int stage, int replica, double allreduce_seconds,
                            int64_t allreduce_bytes, int64_t mismatches) {
  if (!f_) return;
  f_->replica = replica;
  const prometheus::Labels l = {{"stage", absl::StrCat(stage)},
                                {"replica", absl::StrCat(replica)}};
  f_->allreduce_seconds.Add(l).Set(allreduce_seconds);
  f_->allreduce_bytes.Add(l).Set(static_cast<double>(allreduce_bytes));
  f_->replica_mismatches.Add(l).Set(static_cast<double>(mismatches));
}

void StageMetrics::Diagnostic(int stage, const char* reference,
                              double cosine_similarity, double norm_ratio) {
  if (!f_) return;
  const prometheus::Labels l = {{"stage", absl::StrCat(stage)},
                                {"reference", reference}};
  f_->cosine.Add(l).Set(cosine_similarity);
  f_->norm_ratio.Add(l).Set(norm_ratio);
}

void StageMetrics::RebuildError(int stage, double mean, double max) {
  if (!f_) return;
  const std::string s = absl::StrCat(stage);
  f_->rebuild_error.Add({{"stage", s}, {"statistic", "mean"}}).Set(mean);
  f_->rebuild_error.Add({{"stage", s}, {"statistic", "max"}}).Set(max);
}

void StageMetrics::Sent(bool backward, const char* transport, int64_t bytes) {
  if (!f_) return;
  f_->sent.Add({{"stream", Direction(backward)}, {"transport", transport}})
      .Increment(static_cast<double>(bytes));
}

void StageMetrics::Received(bool backward, int64_t bytes) {
  if (!f_) return;
  f_->received.Add({{"stream", Direction(backward)}})
      .Increment(static_cast<double>(bytes));
}

void StageMetrics::Error(absl::StatusCode code) {
  if (!f_) return;
  f_->errors.Add(metrics::ErrorCodeLabel(code)).Increment();
}

void StageMetrics::DataRefused(const char* stream, const char* reason) {
  if (!f_) return;
  f_->refused.Add({{"stream", stream}, {"reason", reason}}).Increment();
}

void StageMetrics::StalenessBound(int stage, int64_t steps) {
  if (!f_) return;
  f_->staleness_bound.Add({{"stage", absl::StrCat(stage)}})
      .Set(static_cast<double>(steps));
}

void StageMetrics::Released(int stage) {
  if (!f_) return;
  State(stage, 0, 0, petra::v1::MemoryBreakdown());
  StalenessBound(stage, 0);
  Optimizer(stage, 0, 0, 0);
  Replicas(stage, f_->replica, 0, 0, 0);
}

}  // namespace petra::stage_server
