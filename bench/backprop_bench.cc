// Plain backprop in one process: the whole network, the forward's graph
// kept, one backward, one SGD step per micro-batch, on --threads torch
// threads. The single-device baseline of the throughput benchmark (the
// paper's "backprop" column): no stages, no rebuild, no transport.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "services/base/crash_report.h"
#include "services/base/flag_set.h"
#include "services/base/large_allocations.h"
#include "services/data/batches.h"
#include "services/data/dataset.h"
#include "services/engine/job_plan.h"
#include "services/job/job_flags.h"
#include "services/job/job_spec_defaults.h"
#include "services/job/job_spec_validation.h"
#include "services/model/batch_norm.h"
#include "services/model/compute_threads.h"
#include "services/model/network.h"

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  using namespace petra;
  using Clock = std::chrono::steady_clock;
  base::KeepLargeAllocationsInHeap();  // as every petra binary does
  int64_t threads = 2, warmup = 5, micro_batches = 0;
  std::string data_root = job::kDefaultDataRoot;
  petra::v1::JobSpec overrides;
  base::FlagSet flags(
      "petra_bench_backprop [job flags] [flags]",
      "Trains a job's network with plain backprop in one process (autograd\n"
      "over the whole network, graph kept, SGD with the job's momentum and\n"
      "weight decay) and prints training samples per second. Only the model,\n"
      "dataset, micro-batch and seed of the job matter.");
  flags.AddInt("threads", &threads, "torch threads");
  flags.AddInt("warmup", &warmup, "micro-batches run before timing");
  flags.AddInt("micro-batches", &micro_batches,
               "micro-batches timed; 0 = one epoch of the job's data");
  flags.AddString("data-root", &data_root,
                  "directory dataset paths are resolved under");
  job::AddJobFlags(flags, &overrides);
  if (int rc = base::ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  if (threads < 1 || warmup < 0 || micro_batches < 0) {
    std::cerr << "petra_bench_backprop: --threads must be >= 1, --warmup and "
                 "--micro-batches >= 0\n";
    return 2;
  }
  petra::v1::JobSpec base;
  base.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  base.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  absl::StatusOr<petra::v1::JobSpec> spec =
      job::AssembleJobSpec(base, "", overrides);
  if (!spec.ok()) {
    std::cerr << "petra_bench_backprop: " << spec.status().message() << "\n";
    return 2;
  }
  petra::model::SetComputeThreads(static_cast<int>(threads));
  absl::StatusOr<data::Splits> data = data::LoadForJob(
      *spec, data_root, catalog::InputShape(spec->model().variant()));
  if (!data.ok()) {
    std::cerr << "petra_bench_backprop: " << data.status().message() << "\n";
    return 1;
  }
  torch::manual_seed(spec->seed());
  absl::StatusOr<model::Network> net =
      model::BuildNetwork(spec->model(), spec->seed());
  if (!net.ok()) {
    std::cerr << "petra_bench_backprop: " << net.status().message() << "\n";
    return 1;
  }
  std::vector<torch::Tensor> params;
  for (const auto& b : net->blocks) {
    for (const torch::Tensor& p : b->parameters()) params.push_back(p);
  }
  const auto& o = spec->optimizer();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(o.learning_rate())
                                    .momentum(o.momentum())
                                    .nesterov(o.nesterov())
                                    .weight_decay(o.weight_decay()));
  data::EpochBatches batches(data->train, engine::TrainBatchOptions(*spec), 0);
  const int64_t timed = micro_batches > 0 ? micro_batches : batches.size();
  if (batches.size() < 1) {
    std::cerr << "petra_bench_backprop: the training split holds no full "
                 "micro-batch\n";
    return 1;
  }
  // Standard training: batch statistics, running statistics updated.
  model::ScopedBnMode bn(model::BnMode::kBatchStatsUpdateRunning);
  Clock::time_point start;
  double loss_sum = 0;
  for (int64_t i = 0; i < warmup + timed; ++i) {
    if (i == warmup) start = Clock::now();
    absl::StatusOr<data::Batch> got = batches.Get(i % batches.size());
    if (!got.ok()) {
      std::cerr << "petra_bench_backprop: " << got.status().message() << "\n";
      return 1;
    }
    data::Batch& batch = *got;
    model::TensorPair x{batch.images, {}};
    for (const auto& b : net->blocks) x = b->Forward(x);
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(x.a, batch.labels);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
    if (i >= warmup) loss_sum += loss.item<double>();
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  const double samples =
      static_cast<double>(timed) * spec->training().micro_batch_size();
  std::printf(
      "backprop (one process, %lld threads): %lld micro-batches of %u in "
      "%.2f s: %.1f samples/s, mean loss %.4f\n",
      static_cast<long long>(threads), static_cast<long long>(timed),
      spec->training().micro_batch_size(), seconds, samples / seconds,
      loss_sum / timed);
  return 0;
}
