// petra_zoo_reference: writes what python/tests/models_test.py compares
// petra.models against. For a network given by the job flags it writes
//   DIR/export.pt     the bytes `petra export` would give for its weights
//                     (every stage checkpoint merged by the same code);
//   DIR/reference.pt  {"input": a batch, "logits": the C++ evaluation}.
// Weights that start constant (BatchNorm and LayerNorm scales and shifts,
// biases, running statistics) are set to random values first, so a Python
// model that ignored or swapped them would not match.
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/base/durable_file.h"
#include "services/base/flag_set.h"
#include "services/catalog/architecture_catalog.h"
#include "services/engine/job_plan.h"
#include "services/engine/state_file.h"
#include "services/job/job_flags.h"

namespace petra {
namespace {

// Constant-initialised tensors get random values of the same scale; the
// rest keep their seeded random initialisation.
void Randomize(std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : state) {
    if (!absl::StartsWith(name, "blocks.") || !t.is_floating_point() ||
        t.numel() == 0) {
      continue;
    }
    if (absl::EndsWith(name, "running_var")) {
      t.copy_(torch::rand_like(t) + 0.5);
    } else if (t.min().item<double>() == t.max().item<double>()) {
      t.add_(0.1 * torch::randn_like(t));
    }
  }
}

absl::Status Run(const petra::v1::JobSpec& overrides, int64_t batch,
                 const std::string& dir) {
  // One stage, synthetic data (no files needed), plain backprop: only the
  // network matters here.
  petra::v1::JobSpec base;
  // A language model reads text (its spec only: no data is read here).
  const bool tokens =
      catalog::IsLanguageModel(overrides.model().architecture());
  base.mutable_dataset()->set_kind(tokens ? petra::v1::DATASET_KIND_TEXT
                                          : petra::v1::DATASET_KIND_SYNTHETIC);
  base.mutable_partition()->set_stage_count(1);
  base.mutable_training()->set_mode(petra::v1::TRAINING_MODE_BACKPROP);
  absl::StatusOr<petra::v1::JobSpec> spec =
      job::AssembleJobSpec(base, "", overrides);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::vector<model::BlockRange>> ranges =
      engine::PlanStages(*spec);
  if (!ranges.ok()) return ranges.status();
  absl::StatusOr<std::vector<std::unique_ptr<engine::StageWorker>>> workers =
      engine::BuildStageWorkers(*spec, *ranges, 1);
  if (!workers.ok()) return workers.status();

  torch::manual_seed(spec->seed() + 1);
  std::vector<std::string> checkpoints;
  for (size_t j = 0; j < workers->size(); ++j) {
    engine::StageWorker& w = *(*workers)[j];
    std::map<std::string, torch::Tensor> state;
    for (auto& [name, t] : w.NamedState(true)) state[name] = t.clone();
    Randomize(state);
    if (absl::Status s = w.LoadNamedState(state, 0); !s.ok()) return s;
    engine::StageCheckpointMeta meta;
    meta.stage_index = static_cast<int64_t>(j);
    absl::StatusOr<std::string> c = engine::EncodeStageCheckpoint(w, meta);
    if (!c.ok()) return c.status();
    checkpoints.push_back(std::move(*c));
  }
  // A normalisation that matters, and class names, as a job records them:
  // petra.models must apply the one and carry the other.
  // A language model's is {seq_len} token ids: nothing to normalise, no
  // class names.
  const std::vector<int64_t> chw =
      tokens ? std::vector<int64_t>{spec->model().transformer().seq_len()}
             : catalog::InputShape(spec->model().variant());
  const int64_t channels = tokens ? 0 : chw[0];
  petra::v1::Preprocessing preprocessing;
  for (int64_t c = 0; c < channels; ++c) {
    preprocessing.add_mean(0.2 + 0.1 * static_cast<double>(c));
    preprocessing.add_std(0.3 + 0.05 * static_cast<double>(c));
  }
  for (int64_t d : chw) preprocessing.add_input_shape(static_cast<uint32_t>(d));
  for (int64_t k = 0; !tokens && k < spec->model().num_classes(); ++k) {
    preprocessing.add_class_names(absl::StrCat("class ", k));
  }
  // The network, which every export carries (export_input.h).
  *preprocessing.mutable_model() = spec->model();
  absl::StatusOr<std::string> exported =
      engine::MergeForExport(checkpoints, preprocessing);
  if (!exported.ok()) return exported.status();

  std::vector<int64_t> shape = {batch};
  shape.insert(shape.end(), chw.begin(), chw.end());
  // Pixel values in [0, 1], as a user has them; the network sees them
  // normalised.
  const torch::Tensor input =
      tokens ? torch::randint(0, spec->model().transformer().vocab(), shape,
                              torch::kInt64)
             : torch::rand(shape);
  torch::Tensor normalised = input.clone();
  for (int64_t c = 0; c < channels; ++c) {
    normalised.select(1, c)
        .sub_(preprocessing.mean(c))
        .div_(preprocessing.std(c));
  }
  model::TensorPair x{normalised, torch::Tensor()};
  for (auto& w : *workers) {
    absl::StatusOr<model::TensorPair> y = w->Evaluate(x);
    if (!y.ok()) return y.status();
    x = *y;
  }
  absl::StatusOr<std::string> reference =
      engine::EncodeStateFile({{"input", input}, {"logits", x.a.contiguous()}});
  if (!reference.ok()) return reference.status();

  std::filesystem::create_directories(dir);
  if (absl::Status s = base::WriteFileAtomically(dir + "/export.pt", *exported);
      !s.ok()) {
    return s;
  }
  return base::WriteFileAtomically(dir + "/reference.pt", *reference);
}

}  // namespace
}  // namespace petra

namespace petra {
namespace {

// One reference: the job's flags, the batch and where to write.
struct Request {
  petra::v1::JobSpec overrides;
  int64_t batch = 4;
  std::string dir;
};

std::unique_ptr<base::FlagSet> Flags(Request* r) {
  auto flags = std::make_unique<base::FlagSet>(
      "petra_zoo_reference [job flags] --output-dir DIR [--batch N]\n"
      "       petra_zoo_reference --serve",
      "Writes DIR/export.pt (a network's weights as `petra export` writes\n"
      "them) and DIR/reference.pt (an input batch and its evaluation-mode\n"
      "logits), for python/tests/models_test.py. --serve: reads one such\n"
      "set of flags a line from stdin and answers each with a line, \"ok\"\n"
      "or \"error: ...\" (libtorch loads once for many references).");
  job::AddJobFlags(*flags, &r->overrides);
  flags->AddInt("batch", &r->batch, "samples in the reference batch");
  flags->AddString("output-dir", &r->dir, "where to write the two files");
  return flags;
}

// What the flags cannot check alone.
absl::Status CheckRequest(const Request& r) {
  if (r.dir.empty() || r.batch < 1) {
    return absl::InvalidArgumentError("needs --output-dir and --batch >= 1");
  }
  return absl::OkStatus();
}

int Serve() {
  for (std::string line; std::getline(std::cin, line);) {
    Request r;
    absl::Status s =
        Flags(&r)->Parse(absl::StrSplit(line, ' ', absl::SkipWhitespace()));
    if (s.ok()) s = CheckRequest(r);
    if (s.ok()) s = Run(r.overrides, r.batch, r.dir);
    std::cout << (s.ok() ? std::string("ok")
                         : absl::StrCat("error: ", s.message()))
              << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace petra

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args == std::vector<std::string>{"--serve"}) return petra::Serve();
  petra::Request r;
  std::unique_ptr<petra::base::FlagSet> flags = petra::Flags(&r);
  if (int rc =
          petra::base::ParseCommandOrExit(*flags, "petra_zoo_reference", args);
      rc >= 0) {
    return rc;
  }
  if (absl::Status s = petra::CheckRequest(r); !s.ok()) {
    std::cerr << "petra_zoo_reference: " << s.message() << "\n";
    return 2;
  }
  if (absl::Status s = petra::Run(r.overrides, r.batch, r.dir); !s.ok()) {
    std::cerr << "petra_zoo_reference: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
