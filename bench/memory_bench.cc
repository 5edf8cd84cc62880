// Memory of the four buffer configurations of the paper's Table 3: delayed
// gradients keeping inputs and weights (PipeDream), inputs only, weights
// only, and PETRA (neither). Trains enough micro-batches of synthetic data to
// fill the pipeline and reports each stage's peak bytes by kind.
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/base/crash_report.h"
#include "services/base/flag_set.h"
#include "services/data/dataset.h"
#include "services/engine/in_process_runner.h"
#include "services/job/enum_names.h"
#include "services/job/job_flags.h"
#include "services/job/job_spec_validation.h"
#include "services/model/device_check.h"
#include "services/model/device_memory.h"
#include "services/model/network.h"

namespace {

struct Config {
  const char* name;
  bool stash_inputs, stash_weights;
};

double MiB(int64_t bytes) { return bytes / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  using namespace petra;
  std::string arch = "revnet18", variant = "cifar";
  double width = 1.0;
  int64_t micro_batch = 64;
  int64_t micro_batches = 0;
  std::string device = "cpu";
  // Memory does not depend on the rate, but a run must stay finite to the
  // end: at the recipe's 0.1 RevNet34 per block (18 stages, the stem's
  // gradient 34 steps late) diverges on random labels (NaN on an H200; on
  // the CPU the running loss rose from 2.40 to 26.8 in 14 micro-batches).
  // At 0.01 it stays at 2.30 through the 35.
  double lr = 0.01;
  base::FlagSet flags(
      "petra_bench_memory [flags]",
      "Per-stage and total memory of the four buffer configurations (Table 3\n"
      "of the PETRA paper), one stage per block, on synthetic data. Prints a\n"
      "Markdown report.");
  flags.AddString("arch", &arch,
                  "architecture (revnet18, revnet34, revnet50, irevnet18, "
                  "revvit)");
  flags.AddString("variant", &variant, "variant (imagenet, cifar, mnist)");
  flags.AddDouble("width", &width, "width multiplier");
  flags.AddInt("micro-batch", &micro_batch, "samples per micro-batch");
  petra::v1::JobSpec base;
  job::AddTransformerFlags(
      flags, [&base] { return base.mutable_model()->mutable_transformer(); });
  flags.AddInt(
      "micro-batches", &micro_batches,
      "micro-batches to train; 0 = enough to fill the pipeline (2J - 1)");
  flags.AddDouble("lr", &lr,
                  "learning rate of the training the memory is read from "
                  "(memory does not depend on it; small keeps deep "
                  "pipelines finite)");
  flags.AddString("device", &device,
                  "where every stage runs (cpu, cuda, cuda:N); on a GPU the "
                  "report adds the device allocator's peak per configuration");
  if (int rc = base::ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  if (absl::Status s = model::CheckDeviceAvailable(device, "--device");
      !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  const bool gpu = device != "cpu";

  auto set_enum = [&](const auto* type, const std::string& text,
                      const char* flag, auto setter) {
    absl::StatusOr<int> v = job::ParseEnumShortName(type, text, flag);
    if (!v.ok()) {
      std::cerr << v.status().message() << "\n";
      std::exit(2);
    }
    setter(*v);
  };
  set_enum(google::protobuf::GetEnumDescriptor<petra::v1::Architecture>(), arch,
           "--arch", [&](int v) {
             base.mutable_model()->set_architecture(petra::v1::Architecture(v));
           });
  set_enum(google::protobuf::GetEnumDescriptor<petra::v1::Variant>(), variant,
           "--variant", [&](int v) {
             base.mutable_model()->set_variant(petra::v1::Variant(v));
           });
  base.mutable_model()->set_width(width);
  base.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  base.mutable_training()->set_micro_batch_size(micro_batch);
  base.mutable_optimizer()->set_learning_rate(lr);
  base.set_seed(1);
  base.add_devices(device);
  absl::StatusOr<petra::v1::JobSpec> probe = job::ResolveJobSpec(base);
  if (!probe.ok()) {
    std::cerr << probe.status().message() << "\n";
    return 2;
  }
  const int stages = job::StageCount(*probe);
  if (micro_batches <= 0) micro_batches = 2 * stages - 1;
  base.mutable_dataset()->set_synthetic_train_size(micro_batches * micro_batch);
  base.mutable_dataset()->set_synthetic_test_size(micro_batch);

  const Config configs[] = {{"inputs + weights (PipeDream)", true, true},
                            {"inputs only", true, false},
                            {"weights only", false, true},
                            {"PETRA (neither)", false, false}};
  std::vector<std::vector<engine::StageReport>> results;
  // On a GPU: the allocator's peak above what was live before the run.
  std::vector<int64_t> device_peaks;
  for (const Config& c : configs) {
    petra::v1::JobSpec spec = base;
    const bool delayed = c.stash_inputs || c.stash_weights;
    spec.mutable_training()->set_mode(delayed ? petra::v1::TRAINING_MODE_DELAYED
                                              : petra::v1::TRAINING_MODE_PETRA);
    spec.mutable_training()->set_stash_inputs(c.stash_inputs);
    spec.mutable_training()->set_stash_weights(c.stash_weights);
    absl::StatusOr<petra::v1::JobSpec> resolved = job::ResolveJobSpec(spec);
    if (!resolved.ok()) {
      std::cerr << resolved.status().message() << "\n";
      return 1;
    }
    const auto& m = resolved->model();
    std::vector<int64_t> chw = catalog::InputShape(m.variant());
    absl::StatusOr<data::Splits> data = data::LoadForJob(*resolved, "", chw);
    if (!data.ok()) {
      std::cerr << data.status().message() << "\n";
      return 1;
    }
    std::fprintf(stderr, "memory bench: %s ...\n", c.name);
    model::ResetDeviceMemoryPeak(device);
    const int64_t live_before = model::ReadDeviceMemory(device).allocated_bytes;
    auto runner =
        engine::InProcessRunner::Create(*resolved, std::move(*data), {});
    if (!runner.ok()) {
      std::cerr << runner.status().message() << "\n";
      return 1;
    }
    absl::StatusOr<engine::EpochReport> r = (*runner)->RunEpoch(1);
    if (!r.ok()) {
      std::cerr << r.status().message() << "\n";
      return 1;
    }
    results.push_back((*runner)->Reports());
    device_peaks.push_back(
        model::ReadDeviceMemory(device).peak_allocated_bytes - live_before);
  }

  int64_t params = 0;
  for (const engine::StageReport& s : results[0]) {
    params += s.memory.parameters_bytes;
  }
  std::printf(
      "%s, variant %s, width %g (%.1f MiB of parameters and BN statistics), "
      "micro-batch %lld, %d stages (one per block), %lld micro-batches "
      "trained per configuration at learning rate %g, on %s.\n\n",
      arch.c_str(), variant.c_str(), width, MiB(params),
      static_cast<long long>(micro_batch), stages,
      static_cast<long long>(micro_batches), lr, device.c_str());
  std::printf(
      "| configuration | input buffers | weight stash | parameters + optimizer "
      "| total peak | saving vs PipeDream | without stage 0's data buffer "
      "| saving vs PipeDream |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  int64_t reference = 0, reference_paper = 0;
  for (size_t c = 0; c < results.size(); ++c) {
    int64_t inputs = 0, weights = 0, model = 0, total = 0;
    for (const engine::StageReport& s : results[c]) {
      inputs += s.memory.peak_activation_buffer_bytes;
      weights += s.memory.peak_weight_stash_bytes;
      model += s.memory.parameters_bytes + s.memory.optimizer_state_bytes;
      total += s.memory.peak_bytes;
    }
    // The paper counts no input buffer on the first stage: its input is
    // the data set, which can be read again.
    const int64_t paper =
        total - results[c][0].memory.peak_activation_buffer_bytes;
    if (c == 0) {
      reference = total;
      reference_paper = paper;
    }
    std::printf(
        "| %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f%% | %.1f MiB "
        "| %.1f%% |\n",
        configs[c].name, MiB(inputs), MiB(weights), MiB(model), MiB(total),
        100.0 * (reference - total) / reference, MiB(paper),
        100.0 * (reference_paper - paper) / reference_paper);
  }
  if (gpu) {
    // Read from the CUDA caching allocator, not from the stages' counters:
    // every stage shares the one device, so this is the peak of their sum
    // (and of the kernels' workspaces), the figure a single GPU must hold.
    std::printf(
        "\nThe device allocator's peak on %s (all %d stages on it):\n\n"
        "| configuration | device peak | saving vs PipeDream |\n"
        "|---|---:|---:|\n",
        device.c_str(), stages);
    for (size_t c = 0; c < device_peaks.size(); ++c) {
      std::printf(
          "| %s | %.1f MiB | %.1f%% |\n", configs[c].name, MiB(device_peaks[c]),
          100.0 * (device_peaks[0] - device_peaks[c]) / device_peaks[0]);
    }
  }
  std::printf("\nPeak bytes per stage (MiB):\n\n| stage | kind |");
  for (const Config& c : configs) std::printf(" %s |", c.name);
  std::printf("\n|---|---|");
  for (size_t c = 0; c < results.size(); ++c) std::printf("---:|");
  std::printf("\n");
  for (size_t j = 0; j < results[0].size(); ++j) {
    std::printf(
        "| %zu | %s |", j,
        results.back()[j].rebuilds_input ? "reversible" : "non-reversible");
    for (size_t c = 0; c < results.size(); ++c) {
      std::printf(" %.2f |", MiB(results[c][j].memory.peak_bytes));
    }
    std::printf("\n");
  }
  return 0;
}
