// petra_optimizer_reference: what python/tests/optimizer_test.py compares
// with torch.optim. It reads IN, a dict of tensors (torch.save's format):
//   "param.<name>"        a parameter's initial value;
//   "grad.<s>.<name>"     its gradient from micro-batch s = 0, 1, ...;
// builds the stage's optimizer (engine::GradientAccumulator) from the job
// flags (--optimizer, --lr, --accumulation, --clip-grad-norm, the schedule,
// ...), with weight decay where model::TakesWeightDecay puts it, and feeds it
// every micro-batch in order. It writes OUT:
//   "param.<name>.<t>"    the parameter after optimizer step t = 0, 1, ...;
//   "lr.<t>"              the rate step t used;
//   "norm.<t>"            the gradient norm before clipping (0 when off);
//   "predicted.<name>"    PredictedChange(param, 1) after the last step;
//   "state.<...>"         what a checkpoint keeps (AppendState).
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/durable_file.h"
#include "services/base/flag_set.h"
#include "services/base/small_file.h"
#include "services/engine/gradient_accumulator.h"
#include "services/engine/lr_schedule.h"
#include "services/engine/state_file.h"
#include "services/job/job_flags.h"
#include "services/model/blocks.h"

namespace petra {
namespace {

absl::Status Run(const petra::v1::JobSpec& overrides, const std::string& in,
                 const std::string& out) {
  petra::v1::JobSpec base;
  base.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  base.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  absl::StatusOr<petra::v1::JobSpec> spec =
      job::AssembleJobSpec(base, "", overrides);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::string> bytes =
      base::ReadSmallFile(in, int64_t{1} << 30, "the optimizer's input");
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<engine::NamedTensors> input = engine::DecodeStateFile(*bytes);
  if (!input.ok()) return input.status();

  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  std::vector<bool> decays;
  for (const auto& [key, t] : *input) {
    if (!absl::StartsWith(key, "param.")) continue;
    names.push_back(key.substr(6));
    params.push_back(t.clone().set_requires_grad(true));
    decays.push_back(model::TakesWeightDecay(names.back(), t));
  }
  int micro_batches = 0;
  while (input->count(absl::StrCat("grad.", micro_batches, ".", names[0]))) {
    ++micro_batches;
  }
  const int k = static_cast<int>(spec->training().accumulation_steps());
  const int64_t steps = micro_batches / k;
  if (steps == 0) {
    return absl::InvalidArgumentError(
        "fewer micro-batches than --accumulation");
  }
  engine::LrSchedule schedule(*spec, steps);
  engine::GradientAccumulator optimizer(params, *spec, schedule, 0.0, decays);

  engine::GradientAccumulator::NamedTensorList written;
  for (int s = 0; s < steps * k; ++s) {
    std::vector<torch::Tensor> grads;
    for (const std::string& name : names) {
      grads.push_back(input->at(absl::StrCat("grad.", s, ".", name)));
    }
    optimizer.Add(params, grads);
    const int64_t t = optimizer.steps();
    optimizer.FinishBackward(nullptr);
    if (optimizer.steps() == t) continue;
    written.emplace_back(absl::StrCat("lr.", t),
                         torch::tensor(schedule.At(t), torch::kFloat64));
    written.emplace_back(
        absl::StrCat("norm.", t),
        torch::tensor(optimizer.last_gradient_norm(), torch::kFloat64));
    for (size_t i = 0; i < params.size(); ++i) {
      written.emplace_back(absl::StrCat("param.", names[i], ".", t),
                           params[i].detach().clone());
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (torch::Tensor c = optimizer.PredictedChange(params[i], 1);
        c.defined()) {
      written.emplace_back("predicted." + names[i], c);
    }
    engine::GradientAccumulator::NamedTensorList state;
    optimizer.AppendState(names[i], params[i], state);
    for (auto& [name, t] : state) written.emplace_back("state." + name, t);
  }
  absl::StatusOr<std::string> encoded = engine::EncodeStateFile(written);
  if (!encoded.ok()) return encoded.status();
  return base::WriteFileAtomically(out, *encoded);
}

}  // namespace
}  // namespace petra

int main(int argc, char** argv) {
  petra::v1::JobSpec overrides;
  std::string in, out;
  petra::base::FlagSet flags(
      "petra_optimizer_reference [job flags] --input IN --output OUT",
      "Feeds the gradients in IN to a stage's optimizer built from the job\n"
      "flags and writes each step's parameters to OUT, for\n"
      "python/tests/optimizer_test.py.");
  petra::job::AddJobFlags(flags, &overrides);
  flags.AddString("input", &in, "parameters and gradients (torch.save dict)");
  flags.AddString("output", &out, "where to write the steps");
  std::vector<std::string> args(argv + 1, argv + argc);
  if (int rc = petra::base::ParseCommandOrExit(
          flags, "petra_optimizer_reference", args);
      rc >= 0) {
    return rc;
  }
  if (in.empty() || out.empty()) {
    std::cerr << "petra_optimizer_reference: --input and --output are "
                 "required\n";
    return 2;
  }
  absl::Status s = petra::Run(overrides, in, out);
  if (!s.ok()) {
    std::cerr << "petra_optimizer_reference: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
