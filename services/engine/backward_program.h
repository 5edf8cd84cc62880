// How a stage produces its backward, chosen once from the job's spec: a
// small strategy, not branches inside the worker. A program says what the
// forward keeps for the backward, and runs the backward from what it kept
// and what came down (the stage's output x~_j and delta_{j+1}):
//   rebuild   reversible stages under PETRA: the input is rebuilt from the
//             output with the current weights; nothing is kept (with
//             overlap_rebuild, the next block's rebuild on a second thread)
//   recompute the input is kept (non-reversible stages, or --stash-inputs)
//             and the forward recomputed with a graph
//   stashed   a copy of the weights each forward used is kept, and the inner
//             program runs with it (--stash-weights)
//   approximate input
//             the weights are stashed but the input is rebuilt with the
//             current ones; the gradient is taken at it with the stashed
//             weights (--stash-weights --rebuild-with current)
//   stored    the forward runs with a graph, kept until the backward
//             differentiates it (mode pipeline without --recompute: the
//             activations GPipe and 1F1B store)
// A new mode or option is a new program here, or one new field.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "services/engine/gradient_accumulator.h"
#include "services/engine/stage_blocks.h"
#include "services/model/tensor_pair.h"

namespace petra::engine {

// What a stage keeps of one forward until its backward.
struct ForwardRecord {
  int64_t tick = 0;
  int64_t step = 0;
  model::TensorPair input;             // when the program keeps it
  // The stored program's: the forward's output, with its graph (whose
  // input is `input`), and the bytes the forward left allocated for it.
  model::TensorPair graph_output;
  int64_t graph_bytes = 0;
  std::vector<torch::Tensor> weights;  // when the program stashes them
  // Mode forward_gradient: the guess v (or the local gradient), until the
  // directional derivative comes back.
  std::vector<torch::Tensor> guess;
  int64_t samples = 0;  // mode forward_gradient
  // For a gradient diagnostic: the forward's input and weights.
  model::TensorPair diagnostic_input;
  std::vector<torch::Tensor> diagnostic_weights;
  // Its forward met NaN or Inf (skip policy): the backward is skipped too.
  bool skipped = false;
};

struct BackwardOutput {
  model::TensorPair input;       // x~_{j-1}: rebuilt or kept input
  model::TensorPair input_grad;  // delta_j; undefined on the first stage
  int64_t delay_ticks = 0;       // ticks between this forward and backward
  int64_t staleness_steps = 0;   // optimizer steps taken in between
  int64_t samples = 0;  // mode forward_gradient: the micro-batch's samples
};

class BackwardProgram {
 public:
  virtual ~BackwardProgram() = default;
  // Nothing is kept between forward and backward but what the weights are.
  virtual bool rebuilds_input() const = 0;
  // The training forward of `x`: without a graph, batch statistics, the
  // running ones untouched (the backward recomputes); the stored program
  // keeps its graph in `record`.
  virtual model::TensorPair Forward(StageBlocks& blocks,
                                    const model::TensorPair& x,
                                    ForwardRecord& record);
  // Keeps in `record` what the backward of input `x` will need.
  virtual void Keep(const model::TensorPair& x, ForwardRecord& record) = 0;
  // The backward: x~_{j-1} and delta_j, parameter gradients into `grads`.
  virtual BackwardOutput Run(const ForwardRecord& record,
                             const model::TensorPair& output,
                             const model::TensorPair& output_grad,
                             GradientAccumulator& grads) = 0;
  // A skipped micro-batch's x~_{j-1}: no graph, no BN running-statistics
  // update.
  virtual model::TensorPair SkippedInput(const ForwardRecord& record,
                                         const model::TensorPair& output) = 0;
};

struct ProgramChoice {
  // Keep every input even where the stage could rebuild it.
  bool stash_inputs = false;
  // Keep a copy of the weights each forward used; backward runs with it.
  bool stash_weights = false;
  // Rebuild block i-1 while block i's gradient is computed (PaReprop).
  bool overlap_rebuild = false;
  // With stash_weights, on a stage that rebuilds: rebuild with the current
  // weights instead of the stashed ones.
  bool rebuild_with_current = false;
  // Keep each forward's graph (the stored program); excludes the others.
  bool store_activations = false;
};

// Stored when asked; else rebuild when every block is reversible and inputs
// are not stashed, else recompute; wrapped in stashed weights when asked
// (the rebuild with the current weights first, when asked).
std::unique_ptr<BackwardProgram> ChooseBackwardProgram(StageBlocks& blocks,
                                                       ProgramChoice choice);

}  // namespace petra::engine
