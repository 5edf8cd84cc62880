#include "services/engine/stage_worker_test_support.h"

#include <gtest/gtest.h>

#include <deque>
#include <optional>

#include "services/job/job_spec_validation.h"
#include "services/model/network.h"
#include "services/model/precision.h"
#include "services/schedule/pipeline_schedule.h"

namespace petra::engine::stage_testing {

using model::TensorPair;

void SetSmallModel(petra::v1::Architecture arch, petra::v1::ModelSpec* model) {
  model->set_architecture(arch);
  if (catalog::IsTransformer(arch)) {
    // A small transformer: 16 tokens of 16 (at 28x28), 4 blocks.
    petra::v1::TransformerSpec* t = model->mutable_transformer();
    t->set_embed_dim(16);
    t->set_depth(4);
    t->set_heads(2);
    t->set_patch_size(7);
  } else {
    model->set_width(0.125);
  }
}

petra::v1::JobSpec Job(petra::v1::Architecture arch, uint32_t k, bool bf16) {
  petra::v1::JobSpec s;
  if (bf16) {
    s.mutable_training()->set_precision(
        petra::v1::TrainingSpec::PRECISION_BF16);
  }
  SetSmallModel(arch, s.mutable_model());
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  // i-RevNet's squeezes need sides divisible by 8.
  s.mutable_model()->set_variant(arch == petra::v1::ARCHITECTURE_IREVNET18
                                     ? petra::v1::VARIANT_CIFAR
                                     : petra::v1::VARIANT_MNIST);
  s.mutable_training()->set_accumulation_steps(k);
  s.mutable_optimizer()->set_learning_rate(0.05);
  s.set_seed(11);
  return *job::ResolveJobSpec(s);
}

// J workers over `ranges` of a freshly seeded network.
std::vector<std::unique_ptr<StageWorker>> Workers(
    const petra::v1::JobSpec& spec,
    const std::vector<model::BlockRange>& ranges, bool stash_inputs,
    bool stash_weights, torch::Device device, bool overlap_rebuild,
    bool rebuild_with_current) {
  model::Network net = *model::BuildNetwork(spec.model(), spec.seed());
  std::vector<std::unique_ptr<StageWorker>> out;
  for (size_t j = 0; j < ranges.size(); ++j) {
    StageConfig c{static_cast<int>(j), static_cast<int>(ranges.size()),
                  stash_inputs, stash_weights};
    c.device = device;
    c.channels_last = ChannelsLast(spec, device);
    c.bf16_wire = spec.training().wire_dtype() ==
                  petra::v1::TrainingSpec::WIRE_DTYPE_BF16;
    c.overlap_rebuild = overlap_rebuild;
    c.rebuild_with_current = rebuild_with_current;
    out.push_back(std::make_unique<StageWorker>(
        std::vector<std::shared_ptr<model::Block>>(
            net.blocks.begin() + ranges[j].begin,
            net.blocks.begin() + ranges[j].end),
        c, spec, LrSchedule(spec, 100)));
  }
  return out;
}

std::vector<data::Batch> Batches(int n, int size, std::vector<int64_t> chw) {
  data::Splits s = data::MakeSynthetic(chw, 10, n * size, 8, 4);
  data::BatchOptions o;
  o.batch_size = size;
  data::EpochBatches e(s.train, o, 0);
  std::vector<data::Batch> out;
  for (int i = 0; i < n; ++i) out.push_back(e.Get(i).value());
  return out;
}

// Drives the PETRA schedule in one thread; `observe(stage, tick)` runs after
// each stage's work in a tick.
void RunPetraSchedule(std::vector<std::unique_ptr<StageWorker>>& w,
                      const std::vector<data::Batch>& batches,
                      const std::function<void(int, int64_t)>& observe) {
  const int J = static_cast<int>(w.size());
  struct Down {
    TensorPair out, grad;
  };
  std::vector<std::deque<TensorPair>> up(J);
  std::vector<std::deque<Down>> down(J);
  const int64_t n = static_cast<int64_t>(batches.size());
  std::vector<schedule::StageSchedule> schedules;
  std::vector<std::optional<schedule::ScheduledOp>> next(J);
  for (int j = 0; j < J; ++j) {
    schedules.emplace_back(schedule::ScheduleKind::kPetra, j, J, n);
    next[j] = schedules[j].Next();
  }
  for (int64_t t = 0; t < n + 2 * J - 2; ++t) {
    for (int j = 0; j < J; ++j) {
      for (; next[j] && next[j]->tick == t; next[j] = schedules[j].Next()) {
        const int64_t m = next[j]->micro_batch;
        if (next[j]->kind == schedule::OpKind::kBackward) {
          Down d = down[j].front();
          down[j].pop_front();
          absl::StatusOr<BackwardOutput> o =
              w[j]->Backward(m, d.out, d.grad, t);
          ASSERT_TRUE(o.ok()) << o.status();
          if (j > 0) down[j - 1].push_back({o->input, o->input_grad});
          continue;
        }
        TensorPair x;
        if (j == 0) {
          x = {batches[m].images, {}};
        } else {
          x = up[j - 1].front();
          up[j - 1].pop_front();
        }
        if (next[j]->kind == schedule::OpKind::kForwardBackward) {
          absl::StatusOr<LossOutput> o =
              w[j]->ForwardLoss(m, x, batches[m].labels, t);
          ASSERT_TRUE(o.ok()) << o.status();
          if (j > 0)
            down[j - 1].push_back({o->backward.input, o->backward.input_grad});
        } else {
          absl::StatusOr<TensorPair> y = w[j]->Forward(m, x, t);
          ASSERT_TRUE(y.ok()) << y.status();
          up[j].push_back(*y);
        }
      }
      if (observe) observe(j, t);
    }
  }
}

// Exact backprop gradients of the same micro-batches, summed; with `bf16`,
// backprop in the precision the job's bf16 means: the blocks under bf16
// autocast, what passes between them in fp32, the loss in fp32.
// With `channels_last`, every image and convolution weight in it: the same
// kernels as the stages', as a deep network's gradient can be sensitive
// enough to the order of sums (i-RevNet's, per block: 4e-3 between NCHW
// and channels_last backprop on one draw of the data) that only the same
// operations make a fair reference.
std::vector<torch::Tensor> ExactGradients(
    const petra::v1::JobSpec& spec, const std::vector<data::Batch>& batches,
    bool bf16, bool channels_last, torch::ScalarType dtype) {
  model::Network net = *model::BuildNetwork(spec.model(), spec.seed());
  for (auto& b : net.blocks) b->to(dtype);
  auto layout = [channels_last](const torch::Tensor& t) {
    return channels_last && t.defined() && t.dim() == 4
               ? t.contiguous(at::MemoryFormat::ChannelsLast)
               : t;
  };
  std::vector<torch::Tensor> params;
  for (auto& b : net.blocks) {
    for (auto& p : b->parameters()) {
      torch::NoGradGuard no_grad;
      p.set_data(layout(p.data()));
      params.push_back(p);
    }
  }
  for (const data::Batch& batch : batches) {
    TensorPair x{batch.images.to(dtype), {}};
    {
      model::ScopedAutocast cast(torch::kCPU, bf16);
      for (auto& b : net.blocks) {
        x = b->Forward({layout(x.a), layout(x.b)});
        x = {model::ToFullPrecision(x.a), model::ToFullPrecision(x.b)};
      }
    }
    torch::nn::functional::cross_entropy(x.a, batch.labels).backward();
  }
  std::vector<torch::Tensor> grads;
  for (auto& p : params) grads.push_back(p.grad().clone());
  return grads;
}

// Every tensor of `a` equals its counterpart in `b` (lists of one length).
bool Same(const std::vector<torch::Tensor>& a,
          const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace petra::engine::stage_testing
