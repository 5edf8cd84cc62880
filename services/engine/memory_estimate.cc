#include "services/engine/memory_estimate.h"

#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "services/schedule/training_mode.h"

namespace petra::engine {
namespace {

constexpr int64_t kFloat = 4;

int64_t Elements(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

}  // namespace

int64_t OutputElements(const model::BlockSummary& b) {
  return Elements(b.output_shape) * (b.output_is_pair ? 2 : 1);
}

StageMemoryEstimate EstimateStageMemory(
    const petra::v1::JobSpec& s, const std::vector<model::BlockSummary>& blocks,
    const std::vector<model::BlockRange>& ranges, int stage,
    const std::vector<int64_t>& input_shape) {
  const model::BlockRange& r = ranges[stage];
  const int stages = static_cast<int>(ranges.size());
  const schedule::ModePlan mode = schedule::PlanMode(s.training());
  StageMemoryEstimate e;
  e.micro_batch = s.training().micro_batch_size();
  e.in_flight = mode.in_flight(stage, stages);
  int64_t params = 0, graph = 0;
  bool reversible = true;
  for (int b = r.begin; b < r.end; ++b) {
    params += blocks[b].parameters;
    reversible &= blocks[b].reversible;
    // What autograd keeps of a forward: every layer's output (the
    // memory-bound layers', counted by the summary) and the block's own.
    graph += blocks[b].forward_elementwise + OutputElements(blocks[b]);
  }
  const int64_t input = r.begin == 0 ? Elements(input_shape)
                                     : OutputElements(blocks[r.begin - 1]);
  const int64_t output = OutputElements(blocks[r.end - 1]);
  // Weights and gradients, and SGD's momentum or AdamW's two moments.
  e.adamw = s.optimizer().kind() == petra::v1::OptimizerSpec::KIND_ADAMW ||
            s.optimizer().kind() == petra::v1::OptimizerSpec::KIND_NADAMW;
  // Delay corrections: the drift's average, and DC-ASGD's mean square.
  const int drift_copies = (s.training().delay_compensation() > 0   ? 2
                            : s.training().discrepancy_correction() ? 1
                                                                    : 0);
  e.parameters_bytes = ((e.adamw ? 4 : 3) + drift_copies) * kFloat * params;
  // A kept graph holds its input with its activations.
  const bool keeps_input = !mode.traffic.derivatives_down &&
                           !mode.store_activations &&
                           (!reversible || mode.stash_inputs);
  if (keeps_input) {
    e.input_buffer_bytes = e.in_flight * e.micro_batch * input * kFloat;
  }
  if (mode.store_activations) {
    e.activation_bytes = e.in_flight * e.micro_batch * (graph + input) * kFloat;
  }
  if (mode.stash_weights || mode.keeps_directions) {
    e.weight_stash_bytes = e.in_flight * params * kFloat;
  }
  // The graph and its gradients for one micro-batch, and up to two
  // micro-batches queued each way on either side.
  e.working_bytes =
      e.micro_batch * kFloat * (2 * graph + 4 * input + 4 * output);
  return e;
}

std::string Breakdown(const StageMemoryEstimate& e) {
  std::string parts =
      absl::StrCat(e.adamw ? "weights, gradients and AdamW's moments "
                           : "weights, gradients and momentum ",
                   Bytes(e.parameters_bytes));
  if (e.input_buffer_bytes > 0) {
    absl::StrAppend(&parts, "; inputs kept for the backward ",
                    Bytes(e.input_buffer_bytes), " (", e.in_flight,
                    " micro-batches in flight)");
  }
  if (e.weight_stash_bytes > 0) {
    absl::StrAppend(&parts, "; weights kept for the backward ",
                    Bytes(e.weight_stash_bytes));
  }
  if (e.activation_bytes > 0) {
    absl::StrAppend(&parts, "; activations kept for the backward ",
                    Bytes(e.activation_bytes), " (", e.in_flight,
                    " micro-batches in flight)");
  }
  absl::StrAppend(&parts, "; working memory ", Bytes(e.working_bytes),
                  " for a micro-batch of ", e.micro_batch);
  return parts;
}

std::string DoesNotFit(int stage, const StageMemoryEstimate& e,
                       int64_t capacity_bytes, const std::string& source,
                       const petra::v1::JobSpec& s) {
  const std::string parts = Breakdown(e);
  std::string advice = "lower --micro-batch";
  if (e.input_buffer_bytes > 0 || e.weight_stash_bytes > 0 ||
      e.activation_bytes > 0) {
    absl::StrAppend(&advice, ", cut the network into more stages (--stages)");
  }
  if (e.activation_bytes > 0) {
    absl::StrAppend(&advice, ", add --recompute");
  }
  if (schedule::PlanMode(s.training()).schedule ==
      schedule::ScheduleKind::kDelayed) {
    absl::StrAppend(&advice,
                    ", or use --mode petra (it keeps neither inputs "
                    "of reversible stages nor weights)");
  } else {
    absl::StrAppend(&advice, ", or give the stage a server with more memory");
  }
  return absl::StrCat("stage ", stage, " needs about ", Bytes(e.total()), " (",
                      parts, ") but this server has ", Bytes(capacity_bytes),
                      " (", source, "): ", advice);
}

}  // namespace petra::engine
