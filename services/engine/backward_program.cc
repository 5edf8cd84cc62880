#include "services/engine/backward_program.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <future>
#include <optional>

#include "services/engine/serial_executor.h"
#include "services/model/batch_norm.h"
#include "services/model/compute_threads.h"
#include "services/model/precision.h"
#include "services/model/reversible_block.h"

namespace petra::engine {
namespace {

using model::BnMode;
using model::ScopedBnMode;
using model::TensorPair;

model::ReversibleBlock& Reversible(model::Block& b) {
  return static_cast<model::ReversibleBlock&>(b);
}

// PETRA on reversible blocks: from the last block down, each rebuilds its
// input from its output with the current weights and gives the input and
// parameter gradients from one recompute of its residual functions. With
// `overlap` (PaReprop), block i-1's rebuild runs on a helper thread while
// block i's gradient is computed: the same operations on the same values,
// so the same bits, in less time where a core is free. On an accelerator
// the helper also computes on a stream of its own (a second CUDA stream),
// ordered with the stage's stream by events.
class RebuildProgram : public BackwardProgram {
 public:
  RebuildProgram(StageBlocks& blocks, bool overlap)
      : blocks_(blocks), overlap_(overlap) {}
  bool rebuilds_input() const override { return true; }
  void Keep(const TensorPair&, ForwardRecord&) override {}

  BackwardOutput Run(const ForwardRecord&, const TensorPair& output,
                     const TensorPair& output_grad,
                     GradientAccumulator& grads) override {
    const auto& blocks = blocks_.blocks();
    ScopedBnMode mode(BnMode::kBatchStatsUpdateRunning);
    if (overlap_ && blocks.size() > 1) {
      return Overlapped(output.detach(), output_grad, grads);
    }
    TensorPair y = output.detach();
    TensorPair g = output_grad;
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
      model::Rebuilt r = Reversible(**it).RebuildWithVjp(y, g);
      grads.Add((*it)->parameters(), r.parameter_grads);
      y = std::move(r.input);
      g = std::move(r.input_grad);
    }
    return {y, g};
  }

  TensorPair SkippedInput(const ForwardRecord&,
                          const TensorPair& output) override {
    return blocks_.Inverse(output);
  }

 private:
  using Pending = std::unique_ptr<model::PendingVjp>;

  BackwardOutput Overlapped(const TensorPair& output,
                            const TensorPair& output_grad,
                            GradientAccumulator& grads) {
    const auto& blocks = blocks_.blocks();
    if (helper_ == nullptr) {
      // Created on the stage's thread: the helper gets its torch threads.
      helper_ = std::make_unique<SerialExecutor>(
          [n = at::get_num_threads()] { model::SetComputeThreads(n); });
    }
    const BnMode mode = model::CurrentBnMode();
    const c10::Device device = output.a.device();
    // Thread-local, like the BN mode: the helper computes in the stage's
    // precision.
    const bool autocast = model::AutocastOn(device.type());
    std::optional<c10::Stream> stage_stream;
    if (!device.is_cpu()) {
      const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
      stage_stream = impl->getStream(device);
      if (!side_ || side_->device() != device) {
        side_ = impl->getStreamFromGlobalPool(device);
      }
    }
    Pending pending = Reversible(*blocks.back()).Rebuild(output);
    TensorPair g = output_grad;
    for (size_t i = blocks.size(); i-- > 0;) {
      std::future<Pending> next;
      std::shared_ptr<c10::Event> done;
      if (i > 0) {
        // Shared: the helper may still be inside set_value when get()
        // returns here.
        auto promise = std::make_shared<std::promise<Pending>>();
        next = promise->get_future();
        model::ReversibleBlock& below = Reversible(*blocks[i - 1]);
        // The side stream starts after everything the stage's stream has
        // queued so far: the input it rebuilds from, and the last use of
        // any side-stream memory freed since (so the caching allocator may
        // hand that memory back to the side stream safely).
        std::shared_ptr<c10::Event> queued;
        if (stage_stream) {
          queued = std::make_shared<c10::Event>(device.type());
          queued->record(*stage_stream);
          done = std::make_shared<c10::Event>(device.type());
        }
        auto rebuild = [promise, &below, x = pending->input(), mode, autocast,
                        device, side = side_, queued, rebuilt = done] {
          try {
            ScopedBnMode m(mode);
            model::ScopedAutocast cast(device.type(), autocast);
            std::optional<c10::StreamGuard> on_side;
            if (queued != nullptr) {
              queued->block(*side);
              on_side.emplace(*side);
            }
            Pending p = below.Rebuild(x);
            if (rebuilt != nullptr) rebuilt->record(*side);
            promise->set_value(std::move(p));
          } catch (...) {
            promise->set_exception(std::current_exception());
          }
        };
        if (!helper_->Post(rebuild)) rebuild();  // stopping: run it here
      }
      // The helper's task refers to the blocks: wait for it however we
      // leave.
      struct Join {
        std::future<Pending>& f;
        ~Join() {
          if (f.valid()) f.wait();
        }
      } join{next};
      model::Rebuilt r = pending->Finish(g);
      grads.Add(blocks[i]->parameters(), r.parameter_grads);
      g = std::move(r.input_grad);
      if (i == 0) return {std::move(r.input), std::move(g)};
      pending = next.get();
      // The stage's stream reads the rebuild only once it is computed.
      if (done != nullptr) done->block(*stage_stream);
    }
    return {};  // not reached: the loop returns at block 0
  }

  StageBlocks& blocks_;
  const bool overlap_;
  std::unique_ptr<SerialExecutor> helper_;
  std::optional<c10::Stream> side_;  // the helper's stream on a device
};

// The input kept at forward, the forward recomputed with a graph.
class RecomputeProgram : public BackwardProgram {
 public:
  explicit RecomputeProgram(StageBlocks& blocks) : blocks_(blocks) {}
  bool rebuilds_input() const override { return false; }
  void Keep(const TensorPair& x, ForwardRecord& record) override {
    record.input = x.detach();
  }

  BackwardOutput Run(const ForwardRecord& record, const TensorPair&,
                     const TensorPair& output_grad,
                     GradientAccumulator& grads) override {
    BackwardOutput out;
    out.input = record.input;
    out.input_grad = blocks_.Recompute(
        record.input,
        [&](const TensorPair& y) {
          std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> og{
              {y.a}, {output_grad.a}};
          if (y.b.defined()) {
            og.first.push_back(y.b);
            og.second.push_back(output_grad.b);
          }
          return og;
        },
        grads);
    return out;
  }

  TensorPair SkippedInput(const ForwardRecord& record,
                          const TensorPair&) override {
    return record.input;
  }

 private:
  StageBlocks& blocks_;
};

// The forward's graph kept until its backward: no recompute, and every
// activation the blocks' autograd saves held in between.
class StoredProgram : public BackwardProgram {
 public:
  explicit StoredProgram(StageBlocks& blocks) : blocks_(blocks) {}
  bool rebuilds_input() const override { return false; }
  TensorPair Forward(StageBlocks&, const TensorPair& x,
                     ForwardRecord& record) override {
    StageBlocks::Graph g = blocks_.ForwardWithGraph(x);
    record.input = g.input;
    record.graph_output = g.output;
    return g.output.detach();
  }
  void Keep(const TensorPair&, ForwardRecord&) override {}

  BackwardOutput Run(const ForwardRecord& record, const TensorPair&,
                     const TensorPair& output_grad,
                     GradientAccumulator& grads) override {
    const TensorPair& y = record.graph_output;
    std::vector<torch::Tensor> outputs{y.a}, grad_outputs{output_grad.a};
    if (y.b.defined()) {
      outputs.push_back(y.b);
      grad_outputs.push_back(output_grad.b);
    }
    BackwardOutput out;
    out.input = record.input.detach();
    out.input_grad = blocks_.Differentiate({record.input, y}, outputs,
                                           grad_outputs, grads);
    return out;
  }

  TensorPair SkippedInput(const ForwardRecord& record,
                          const TensorPair&) override {
    return record.input.detach();
  }

 private:
  StageBlocks& blocks_;
};

// The weights the forward used, kept and put back for the backward; the
// update then applies to the current ones.
class StashedWeightsProgram : public BackwardProgram {
 public:
  StashedWeightsProgram(StageBlocks& blocks,
                        std::unique_ptr<BackwardProgram> inner)
      : blocks_(blocks), inner_(std::move(inner)) {}
  bool rebuilds_input() const override { return inner_->rebuilds_input(); }
  void Keep(const TensorPair& x, ForwardRecord& record) override {
    inner_->Keep(x, record);
    record.weights = blocks_.CopyWeights();
  }

  BackwardOutput Run(const ForwardRecord& record, const TensorPair& output,
                     const TensorPair& output_grad,
                     GradientAccumulator& grads) override {
    std::vector<torch::Tensor> current = blocks_.CopyWeights();
    blocks_.SetWeights(record.weights);
    BackwardOutput out = inner_->Run(record, output, output_grad, grads);
    blocks_.SetWeights(current);
    return out;
  }

  TensorPair SkippedInput(const ForwardRecord& record,
                          const TensorPair& output) override {
    return inner_->SkippedInput(record, output);
  }

 private:
  StageBlocks& blocks_;
  std::unique_ptr<BackwardProgram> inner_;
};

// Table 4's fourth row, the official code's approximate_input: the weights
// each forward used are stashed, yet the input is rebuilt with the current
// ones (as PETRA rebuilds it); the gradient is then taken at that rebuilt
// input with the stashed weights, by a recompute. So it isolates the
// rebuild's approximation from the weights'. Costs the inverses plus a
// forward and a backward, where the rebuild program costs one recompute.
class ApproximateInputProgram : public BackwardProgram {
 public:
  explicit ApproximateInputProgram(StageBlocks& blocks)
      : blocks_(blocks),
        stashed_(blocks, std::make_unique<RecomputeProgram>(blocks)) {}
  bool rebuilds_input() const override { return true; }
  void Keep(const TensorPair&, ForwardRecord& record) override {
    record.weights = blocks_.CopyWeights();
  }

  BackwardOutput Run(const ForwardRecord& record, const TensorPair& output,
                     const TensorPair& output_grad,
                     GradientAccumulator& grads) override {
    ForwardRecord rebuilt = record;
    rebuilt.input = blocks_.Inverse(output);
    return stashed_.Run(rebuilt, output, output_grad, grads);
  }

  TensorPair SkippedInput(const ForwardRecord&,
                          const TensorPair& output) override {
    return blocks_.Inverse(output);
  }

 private:
  StageBlocks& blocks_;
  StashedWeightsProgram stashed_;
};

}  // namespace

TensorPair BackwardProgram::Forward(StageBlocks& blocks, const TensorPair& x,
                                    ForwardRecord&) {
  torch::NoGradGuard no_grad;
  ScopedBnMode mode(BnMode::kBatchStats);
  return blocks.Forward(x);
}

std::unique_ptr<BackwardProgram> ChooseBackwardProgram(StageBlocks& blocks,
                                                       ProgramChoice choice) {
  if (choice.store_activations) return std::make_unique<StoredProgram>(blocks);
  std::unique_ptr<BackwardProgram> p;
  const bool rebuilds = blocks.all_reversible() && !choice.stash_inputs;
  if (rebuilds && choice.stash_weights && choice.rebuild_with_current) {
    return std::make_unique<ApproximateInputProgram>(blocks);
  }
  if (rebuilds) {
    p = std::make_unique<RebuildProgram>(blocks, choice.overlap_rebuild);
  } else {
    p = std::make_unique<RecomputeProgram>(blocks);
  }
  if (choice.stash_weights) {
    p = std::make_unique<StashedWeightsProgram>(blocks, std::move(p));
  }
  return p;
}

}  // namespace petra::engine
