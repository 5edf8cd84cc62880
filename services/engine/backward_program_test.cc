// What each backward program computes once the weights have moved between a
// forward and its backward: the paper's Table 4 rows, each checked against
// an autograd reference taken at the input and weights the row names.
#include "services/engine/backward_program.h"

#include <gtest/gtest.h>

#include <string>

#include "services/job/job_spec_validation.h"
#include "services/model/batch_norm.h"
#include "services/model/network.h"
#include "services/model/reversible_block.h"

namespace petra::engine {
namespace {

using model::TensorPair;

petra::v1::JobSpec Spec() {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_width(0.125);
  s.mutable_model()->set_variant(petra::v1::VARIANT_MNIST);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.set_seed(5);
  // One micro-batch a step: the gradient is the micro-batch's own.
  s.mutable_training()->set_accumulation_steps(1);
  return *job::ResolveJobSpec(s);
}

// Where a row takes its gradient: which input, which weights.
enum class Input { kKept, kRebuiltWithOld, kRebuiltWithNew };
enum class Weights { kOld, kNew };

struct Row {
  std::string name;
  ProgramChoice choice;
  Input input;
  Weights weights;
};

void PrintTo(const Row& r, std::ostream* os) { *os << r.name; }

struct Result {
  TensorPair input;       // what goes down as x~_{j-1}
  TensorPair input_grad;  // delta_j
  std::vector<torch::Tensor> param_grads;
};

// One reversible block of RevNet18 (its second block) and its stage.
struct Stage {
  Stage() {
    net = *model::BuildNetwork(spec.model(), spec.seed());
    block = net.blocks[1];
    blocks = std::make_unique<StageBlocks>(
        std::vector<std::shared_ptr<model::Block>>{block}, /*first=*/false);
  }
  model::ReversibleBlock& reversible() {
    return static_cast<model::ReversibleBlock&>(*block);
  }
  petra::v1::JobSpec spec = Spec();
  model::Network net;
  std::shared_ptr<model::Block> block;
  std::unique_ptr<StageBlocks> blocks;
};

std::vector<torch::Tensor> Moved(const std::vector<torch::Tensor>& w) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& t : w)
    out.push_back(t + 0.05 * torch::randn_like(t));
  return out;
}

// The gradients at (x, weights) by autograd through the block's forward.
Result Reference(Stage& s, const TensorPair& x,
                 const std::vector<torch::Tensor>& weights,
                 const TensorPair& dy) {
  const std::vector<torch::Tensor> keep = s.blocks->CopyWeights();
  s.blocks->SetWeights(weights);
  model::ScopedBnMode mode(model::BnMode::kBatchStats);
  TensorPair in{x.a.detach().requires_grad_(), x.b.detach().requires_grad_()};
  TensorPair y = s.block->Forward(in);
  std::vector<torch::Tensor> wrt = {in.a, in.b};
  for (const torch::Tensor& p : s.blocks->parameters()) wrt.push_back(p);
  std::vector<torch::Tensor> g = torch::autograd::grad(
      {y.a, y.b}, wrt, {dy.a, dy.b}, false, false, /*allow_unused=*/true);
  s.blocks->SetWeights(keep);
  return {x, {g[0], g[1]}, std::vector<torch::Tensor>(g.begin() + 2, g.end())};
}

TensorPair Inverse(Stage& s, const TensorPair& y,
                   const std::vector<torch::Tensor>& weights) {
  const std::vector<torch::Tensor> keep = s.blocks->CopyWeights();
  s.blocks->SetWeights(weights);
  torch::NoGradGuard no_grad;
  model::ScopedBnMode mode(model::BnMode::kBatchStats);
  TensorPair x = s.reversible().Inverse(y);
  s.blocks->SetWeights(keep);
  return x;
}

bool Close(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::allclose(a, b, /*rtol=*/1e-4, /*atol=*/1e-6);
}

bool Close(const Result& a, const Result& b) {
  if (!Close(a.input.a, b.input.a) || !Close(a.input.b, b.input.b) ||
      !Close(a.input_grad.a, b.input_grad.a) ||
      !Close(a.input_grad.b, b.input_grad.b)) {
    return false;
  }
  for (size_t i = 0; i < a.param_grads.size(); ++i) {
    if (a.param_grads[i].defined() != b.param_grads[i].defined()) return false;
    if (a.param_grads[i].defined() &&
        !Close(a.param_grads[i], b.param_grads[i])) {
      return false;
    }
  }
  return true;
}

class TableFourRow : public ::testing::TestWithParam<Row> {};

// Forward with the old weights, move them, then backward: the row's program
// gives what autograd gives at the row's input and weights, and not what the
// other rows give (the weights moved enough for the rows to differ).
TEST_P(TableFourRow, TakesTheGradientWhereTheRowSays) {
  const Row& row = GetParam();
  Stage s;
  ASSERT_TRUE(s.block->reversible());
  std::unique_ptr<BackwardProgram> program =
      ChooseBackwardProgram(*s.blocks, row.choice);
  GradientAccumulator grads(s.blocks->parameters(), s.spec,
                            LrSchedule(s.spec, 100));

  torch::manual_seed(1);
  TensorPair x, y;
  {
    torch::NoGradGuard no_grad;
    model::ScopedBnMode mode(model::BnMode::kBatchStats);
    x = s.net.blocks[0]->Forward({torch::randn({4, 1, 28, 28}), {}});
    y = s.block->Forward(x);
  }
  ForwardRecord record;
  program->Keep(x, record);
  const std::vector<torch::Tensor> old_w = s.blocks->CopyWeights();
  const std::vector<torch::Tensor> new_w = Moved(old_w);
  s.blocks->SetWeights(new_w);
  const TensorPair dy{torch::randn_like(y.a), torch::randn_like(y.b)};

  BackwardOutput out = program->Run(record, y, dy, grads);
  Result got{out.input, out.input_grad, {}};
  for (const torch::Tensor& p : s.blocks->parameters()) {
    got.param_grads.push_back(p.grad().defined() ? p.grad().clone()
                                                 : torch::Tensor());
  }
  // The update applies to the current weights: they are back after the run.
  for (size_t i = 0; i < new_w.size(); ++i) {
    EXPECT_TRUE(torch::equal(s.blocks->parameters()[i], new_w[i])) << i;
  }

  auto at = [&](Input in, Weights w) {
    const TensorPair input = in == Input::kKept ? x
                             : in == Input::kRebuiltWithOld
                                 ? Inverse(s, y, old_w)
                                 : Inverse(s, y, new_w);
    return Reference(s, input, w == Weights::kOld ? old_w : new_w, dy);
  };
  EXPECT_TRUE(Close(got, at(row.input, row.weights))) << row.name;
  // The other places differ from this one.
  const std::pair<Input, Weights> others[] = {
      {Input::kKept, Weights::kOld},
      {Input::kKept, Weights::kNew},
      {Input::kRebuiltWithNew, Weights::kOld},
      {Input::kRebuiltWithNew, Weights::kNew}};
  for (const auto& [in, w] : others) {
    // Rebuilt with the old weights is the kept input up to rounding.
    const Input mine =
        row.input == Input::kRebuiltWithOld ? Input::kKept : row.input;
    if (in == mine && w == row.weights) continue;
    EXPECT_FALSE(Close(got, at(in, w)))
        << row.name << " also matches input " << static_cast<int>(in)
        << ", weights " << static_cast<int>(w);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rows, TableFourRow,
    ::testing::Values(
        // stash_inputs, stash_weights, overlap_rebuild, rebuild_with_current
        Row{"InputsAndWeights_PipeDream",
            {true, true, false, false},
            Input::kKept,
            Weights::kOld},
        Row{"InputsOnly",
            {true, false, false, false},
            Input::kKept,
            Weights::kNew},
        Row{"WeightsOnly_RebuiltWithStashed",
            {false, true, false, false},
            Input::kRebuiltWithOld,
            Weights::kOld},
        Row{"WeightsOnly_RebuiltWithCurrent",
            {false, true, false, true},
            Input::kRebuiltWithNew,
            Weights::kOld},
        Row{"Petra",
            {false, false, false, false},
            Input::kRebuiltWithNew,
            Weights::kNew}),
    [](const ::testing::TestParamInfo<Row>& i) { return i.param.name; });

// rebuild_with_current means nothing where nothing is rebuilt: with inputs
// stashed the program recomputes from the kept input.
TEST(ChooseBackwardProgram, RebuildWithCurrentNeedsARebuildingStage) {
  Stage s;
  EXPECT_TRUE(ChooseBackwardProgram(*s.blocks, {false, true, false, true})
                  ->rebuilds_input());
  EXPECT_FALSE(ChooseBackwardProgram(*s.blocks, {true, true, false, true})
                   ->rebuilds_input());
}

}  // namespace
}  // namespace petra::engine
