#include "services/engine/forward_gradient_stage.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "services/model/batch_norm.h"
#include "services/model/classification_loss.h"
#include "services/model/forward_gradient.h"
#include "services/model/seed_mix.h"

namespace petra::engine {
namespace {

using model::BnMode;
using model::ScopedBnMode;
using model::TensorPair;

// One seed per (job seed, stage, what): the same on every runner and after
// a restore, whatever order the stages' threads run in.
uint64_t Seed(uint64_t job_seed, int stage, uint64_t a, uint64_t b) {
  using model::SplitMix64;
  return SplitMix64(SplitMix64(SplitMix64(SplitMix64(job_seed) ^ stage) ^ a) ^
                    b);
}

std::vector<torch::Tensor> Parts(const TensorPair& p) {
  std::vector<torch::Tensor> out;
  if (p.a.defined()) out.push_back(p.a);
  if (p.b.defined()) out.push_back(p.b);
  return out;
}

std::string HeadName(int stage, const char* what) {
  return absl::StrCat("aux_head.", stage, ".", what);
}

}  // namespace

ForwardGradientStage::ForwardGradientStage(const petra::v1::JobSpec& resolved,
                                           int stage, LrSchedule schedule,
                                           torch::Device device)
    : spec_(resolved),
      stage_(stage),
      guess_(resolved.training().forward_gradient().guess()),
      classes_(resolved.model().num_classes()),
      schedule_(std::move(schedule)),
      device_(device) {}

ForwardGradientStage::~ForwardGradientStage() = default;

void ForwardGradientStage::BuildHead(int64_t features) {
  head_ = model::AuxiliaryHead(features, classes_,
                               Seed(spec_.seed(), stage_, 0xa0, 0), device_);
  head_optimizer_ = std::make_unique<GradientAccumulator>(
      std::vector<torch::Tensor>{head_.weight(), head_.bias()}, spec_,
      schedule_);
  head_optimizer_->ResetCounters(restored_steps_);
}

absl::Status ForwardGradientStage::CheckArrived(
    uint64_t id, const TensorPair& x, const std::vector<TensorPair>& tangents,
    const torch::Tensor& labels) const {
  if (!labels.defined() || labels.dim() != 1 || labels.size(0) != x.a.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch ", id, ": stage ", stage_, " needs the labels of its ",
        x.a.size(0), " samples for its local loss"));
  }
  const size_t expected =
      guess_ == petra::v1::ForwardGradientSpec::GUESS_LOCAL_ONLY
          ? 0
          : static_cast<size_t>(stage_);
  if (tangents.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch ", id, ": stage ", stage_, " needs ", expected,
        " tangents (one per earlier stage), received ", tangents.size()));
  }
  for (const TensorPair& t : tangents) {
    if (t.a.sizes() != x.a.sizes() || t.b.defined() != x.b.defined() ||
        (t.b.defined() && t.b.sizes() != x.b.sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("micro-batch ", id,
                       ": a tangent's shape differs from the "
                       "activation's"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TangentForward> ForwardGradientStage::Forward(
    StageBlocks& blocks, const TensorPair& x,
    const std::vector<TensorPair>& tangents, const torch::Tensor& labels,
    uint64_t id, int64_t step) {
  using petra::v1::ForwardGradientSpec;
  TangentForward out;
  const std::vector<torch::Tensor>& params = blocks.parameters();
  const bool local = guess_ != ForwardGradientSpec::GUESS_RANDOM;
  if (local) {
    // The local loss: the blocks and the head with a graph (this forward
    // updates the BN running statistics), one backward to the stage's
    // parameters and the head's.
    torch::AutoGradMode grad_on(true);
    ScopedBnMode mode(BnMode::kBatchStatsUpdateRunning);
    TensorPair y = blocks.Forward(x.detach());
    const int64_t features = model::PooledFeatures(y.detach()).size(1);
    if (!head_.built()) BuildHead(features);
    if (head_.features() != features) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the auxiliary head of stage ", stage_, " (\"",
          HeadName(stage_, "weight"), "\") takes ", head_.features(),
          " features, but the stage's output has ", features));
    }
    torch::Tensor loss =
        model::CrossEntropy(head_.Logits(y), labels.to(device_));
    std::vector<torch::Tensor> wrt = params;
    wrt.push_back(head_.weight());
    wrt.push_back(head_.bias());
    std::vector<torch::Tensor> g =
        torch::autograd::grad({loss}, wrt, {}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0; i < g.size(); ++i) {
      if (!g[i].defined()) g[i] = torch::zeros_like(wrt[i]);
    }
    head_optimizer_->Add({head_.weight(), head_.bias()},
                         {g[params.size()], g.back()});
    head_optimizer_->FinishBackward([] {});
    g.resize(params.size());
    out.guess = guess_ == ForwardGradientSpec::GUESS_LOCAL_ONLY
                    ? std::move(g)
                    : model::Normalised(g);
    out.local_loss = loss.item<double>();
    out.output = y.detach();
    if (guess_ == ForwardGradientSpec::GUESS_LOCAL_ONLY && tangents.empty()) {
      return out;
    }
  } else {
    out.guess = model::RandomGuess(
        params, Seed(spec_.seed(), stage_, static_cast<uint64_t>(step), id));
  }

  // The tangents, block by block: each incoming one moves the input only;
  // the stage's own starts at zero and moves each block's parameters by
  // its slice of v.
  const bool own = guess_ != ForwardGradientSpec::GUESS_LOCAL_ONLY;
  std::vector<TensorPair> moving = tangents;
  TensorPair own_tangent;  // zero at the first block
  TensorPair h = x;
  size_t offset = 0;
  // Under the random guess this is the only forward: it updates the BN
  // running statistics.
  ScopedBnMode mode(local ? BnMode::kBatchStats
                          : BnMode::kBatchStatsUpdateRunning);
  for (const auto& block : blocks.blocks()) {
    const size_t n = block->parameters().size();
    std::vector<model::Tangent> ts;
    ts.reserve(moving.size() + 1);
    for (const TensorPair& t : moving) ts.push_back({t, {}});
    if (own) {
      ts.push_back({own_tangent, std::vector<torch::Tensor>(
                                     out.guess.begin() + offset,
                                     out.guess.begin() + offset + n)});
    }
    model::TangentOutput o = model::PushTangents(*block, h, ts);
    offset += n;
    h = std::move(o.output);
    if (own) {
      own_tangent = std::move(o.tangents.back());
      o.tangents.pop_back();
    }
    moving = std::move(o.tangents);
  }
  if (!local) out.output = h;
  out.tangents = std::move(moving);
  if (own) out.tangents.push_back(std::move(own_tangent));
  return out;
}

absl::StatusOr<std::vector<torch::Tensor>> ForwardGradientStage::Estimate(
    const std::vector<torch::Tensor>& guess,
    const std::vector<double>& directional) const {
  if (directional.size() != static_cast<size_t>(stage_) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", stage_, " needs ", stage_ + 1,
        " directional derivatives (one per stage up to it), received ",
        directional.size()));
  }
  if (guess_ == petra::v1::ForwardGradientSpec::GUESS_LOCAL_ONLY) return guess;
  return model::Estimate(directional.back(), guess);
}

NamedTensorList ForwardGradientStage::NamedState(bool with_optimizer) const {
  NamedTensorList out;
  if (!head_.built()) return out;
  const std::pair<const char*, const torch::Tensor*> named[] = {
      {"weight", &head_.weight()}, {"bias", &head_.bias()}};
  for (const auto& [what, t] : named) {
    out.emplace_back(HeadName(stage_, what), t->detach());
  }
  if (!with_optimizer) return out;
  for (const auto& [what, t] : named) {
    head_optimizer_->AppendState(HeadName(stage_, what), *t, out);
  }
  return out;
}

absl::Status ForwardGradientStage::LoadNamedState(
    const std::map<std::string, torch::Tensor>& state, int64_t steps) {
  torch::NoGradGuard no_grad;
  restored_steps_ = steps;
  auto w = state.find(HeadName(stage_, "weight"));
  auto b = state.find(HeadName(stage_, "bias"));
  if (w == state.end() && b == state.end()) {
    // Saved before the head's first forward: it is built then, as it
    // would have been.
    head_ = model::AuxiliaryHead();
    head_optimizer_.reset();
    return absl::OkStatus();
  }
  if (w == state.end() || b == state.end() || w->second.dim() != 2 ||
      w->second.size(0) != classes_ ||
      b->second.sizes() != torch::IntArrayRef{classes_}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint: the auxiliary head of stage ", stage_, " needs \"",
        HeadName(stage_, "weight"), "\" of shape [", classes_, ", F] and \"",
        HeadName(stage_, "bias"), "\" of shape [", classes_, "]"));
  }
  BuildHead(w->second.size(1));
  head_.weight().copy_(w->second);
  head_.bias().copy_(b->second);
  for (torch::Tensor* t : {&head_.weight(), &head_.bias()}) {
    const char* what = t == &head_.weight() ? "weight" : "bias";
    absl::Status loaded =
        head_optimizer_->LoadState(state, HeadName(stage_, what), *t);
    if (!loaded.ok()) return loaded;
  }
  return absl::OkStatus();
}

int64_t ForwardGradientStage::state_bytes() const {
  if (!head_.built()) return 0;
  return head_.parameter_bytes() + head_optimizer_->state_bytes();
}

std::vector<double> DirectionalDerivatives(
    const TensorPair& input_grad, const std::vector<TensorPair>& tangents,
    int count) {
  std::vector<double> d(count, 0.0);
  const std::vector<torch::Tensor> delta = Parts(input_grad);
  for (size_t k = 0; k < tangents.size() && k < d.size(); ++k) {
    d[k] = model::Dot(delta, Parts(tangents[k]));
  }
  return d;
}

}  // namespace petra::engine
