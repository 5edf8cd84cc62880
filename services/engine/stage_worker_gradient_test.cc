// FrozenWeights: with the weights held still, PETRA's gradient on every
// stage equals backprop's (the paper's exactness claim, Section 3), for each
// architecture, partition, memory format and device, and for every
// buffer configuration of Table 4.
#include "services/engine/stage_worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>

#include "services/data/batches.h"
#include "services/engine/stage_io.h"
#include "services/engine/stage_report.h"
#include "services/engine/stage_worker_test_support.h"
#include "services/job/job_spec_validation.h"
#include "services/model/device_memory.h"
#include "services/model/network.h"
#include "services/model/network_summary.h"
#include "services/model/partition_plan.h"
#include "services/model/precision.h"
#include "services/schedule/pipeline_schedule.h"
#include "tests/support/require_cuda.h"

namespace petra::engine {
namespace {

struct GradCase {
  std::string name;
  petra::v1::Architecture arch;
  int stages;         // 0 = per block
  bool cuda = false;  // every stage on the GPU (the exact reference on CPU)
  bool bf16 = false;  // training.precision bf16, against bf16 backprop
  bool channels_last = false;  // training.memory_format channels_last
  // fp32's bounds against the float64 gradient: PETRA's error may be twice
  // fp32 backprop's own and this much more, for the worst parameter
  // (relative to its largest entry) and for the whole gradient (relative to
  // its norm). On the CPU, PETRA's is within 1.2 times backprop's (1.8 for
  // i-RevNet per block, whose 8 chained rebuilds add 1.3e-6) wherever
  // backprop's is above 1e-6. A wrong rebuild or a misread layout is off by
  // orders more.
  double tolerance = 1e-5;
  double whole_tolerance = 1e-6;
};

// Largest error over parameters, relative to each one's largest entry.
double WorstRelativeError(const std::vector<torch::Tensor>& got,
                          const std::vector<torch::Tensor>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double scale = want[i].abs().max().item<double>();
    double err = (got[i] - want[i]).abs().max().item<double>();
    if (scale > 1e-8) worst = std::max(worst, err / scale);
  }
  return worst;
}

// ||got - want|| / ||want|| over every parameter at once.
double WholeRelativeError(const std::vector<torch::Tensor>& got,
                          const std::vector<torch::Tensor>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]).to(torch::kDouble).pow(2).sum().item<double>();
    norm += want[i].to(torch::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

class FrozenWeights : public ::testing::TestWithParam<GradCase> {};

// With every micro-batch in one accumulation (no optimizer step), the
// weights stay frozen: the rebuilt inputs are exact and PETRA's accumulated
// gradient equals backprop's.
TEST_P(FrozenWeights, PetraGradientEqualsBackprop) {
  if (GetParam().cuda) {
    PETRA_REQUIRE_CUDA();
    test_support::UseExactGpuMath();
  }
  const torch::Device device = GetParam().cuda ? torch::kCUDA : torch::kCPU;
  const int n = 6;
  const uint32_t k = 1000;  // never reached: no step
  const bool bf16 = GetParam().bf16;
  petra::v1::JobSpec spec = Job(GetParam().arch, k, bf16);
  if (GetParam().channels_last) {
    spec.mutable_training()->set_memory_format(
        petra::v1::TrainingSpec::MEMORY_FORMAT_CHANNELS_LAST);
  }
  std::vector<data::Batch> batches =
      Batches(n, 8, catalog::InputShape(spec.model().variant()));
  petra::v1::JobSpec planned = spec;
  if (GetParam().stages > 0)
    planned.mutable_partition()->set_stage_count(GetParam().stages);
  std::vector<model::BlockRange> ranges =
      *model::PlanPartition(*model::DescribeNetwork(spec.model()), planned);
  auto workers = Workers(spec, ranges, false, false, device);
  RunPetraSchedule(workers, batches);
  std::vector<torch::Tensor> petra;
  for (auto& w : workers) {
    EXPECT_EQ(w->optimizer_steps(), 0);
    for (auto& p : w->parameters()) {
      EXPECT_EQ(p.device().type(), device.type());
      petra.push_back(p.grad().cpu() * double(k));
    }
  }
  std::vector<torch::Tensor> exact =
      ExactGradients(spec, batches, bf16, GetParam().channels_last);
  ASSERT_EQ(petra.size(), exact.size());
  if (!bf16) {
    // Against the float64 gradient, PETRA in fp32 is as near as fp32
    // backprop is: some parameters' gradients are sums of large terms that
    // cancel, where fp32 backprop itself is off by 5e-2 of the largest
    // entry (i-RevNet per block in channels_last, ResNet18), and any other
    // order of the same sums (PETRA's rebuilt inputs) is off as much,
    // differently. Comparing the two fp32 results measured that noise.
    const std::vector<torch::Tensor> f64 = ExactGradients(
        spec, batches, false, GetParam().channels_last, torch::kDouble);
    const double own = WorstRelativeError(exact, f64);
    const double own_whole = WholeRelativeError(exact, f64);
    const double got = WorstRelativeError(petra, f64);
    const double got_whole = WholeRelativeError(petra, f64);
    EXPECT_LE(got, 2 * own + GetParam().tolerance)
        << "max relative error over parameters against float64, fp32 "
           "backprop's "
        << own;
    EXPECT_LE(got_whole, 2 * own_whole + GetParam().whole_tolerance)
        << "relative error of the whole gradient against float64, fp32 "
           "backprop's "
        << own_whole;
  } else {
    // The same operations in the same precision, but a rebuilt input is the
    // forward's only to fp32 rounding, and where an element sits on a bf16
    // rounding boundary its bf16 copy inside F may round to the neighbour
    // (one bf16 step, 2^-8 relative). Down a short chain of rebuilds (here
    // at most 4 blocks) that reaches the gradients by a few bf16 steps of
    // their largest entry: 2e-2 (5 steps). A longer chain compounds it (see
    // RebuildErrorIsOfFp32RoundingPerBlockAndGrowsDownABf16Chain): i-RevNet,
    // 8 chained blocks, is off by 0.13 per block and 0.021 on 3 stages. bf16
    // against fp32 differs everywhere, so the bf16 reference must be the
    // nearer.
    const double worst = WorstRelativeError(petra, exact);
    EXPECT_LE(worst, 2e-2) << "max relative error over parameters";
    const double to_fp32 = WorstRelativeError(
        petra, ExactGradients(spec, batches, false, GetParam().channels_last));
    EXPECT_LT(worst, to_fp32) << "bf16 PETRA is nearer fp32 backprop than "
                                 "bf16 backprop: did autocast run?";
  }
  int rebuilding = 0;
  for (auto& w : workers) rebuilding += w->rebuilds_input();
  if (GetParam().stages == 0 &&
      GetParam().arch == petra::v1::ARCHITECTURE_REVNET18) {
    EXPECT_EQ(rebuilding, 5);  // 2 + 1 + 1 + 1 same-shape reversible blocks
  }
  if (GetParam().stages == 0 &&
      GetParam().arch == petra::v1::ARCHITECTURE_IREVNET18) {
    EXPECT_EQ(rebuilding, 8);  // every block but the stem and the head
  }
  if (GetParam().stages == 0 &&
      GetParam().arch == petra::v1::ARCHITECTURE_REVVIT) {
    EXPECT_EQ(rebuilding, 4);  // every transformer block
  }
}

INSTANTIATE_TEST_SUITE_P(
    Splits, FrozenWeights,
    ::testing::Values(
        GradCase{"RevNet18_J1", petra::v1::ARCHITECTURE_REVNET18, 1},
        GradCase{"RevNet18_J2", petra::v1::ARCHITECTURE_REVNET18, 2},
        GradCase{"RevNet18_PerBlock", petra::v1::ARCHITECTURE_REVNET18, 0},
        GradCase{"RevNet34_PerBlock", petra::v1::ARCHITECTURE_REVNET34, 0},
        GradCase{"IRevNet18_PerBlock", petra::v1::ARCHITECTURE_IREVNET18, 0},
        GradCase{"IRevNet18_J3", petra::v1::ARCHITECTURE_IREVNET18, 3},
        GradCase{"ResNet18_PerBlock", petra::v1::ARCHITECTURE_RESNET18, 0},
        GradCase{"RevViT_J1", petra::v1::ARCHITECTURE_REVVIT, 1},
        GradCase{"RevViT_J2", petra::v1::ARCHITECTURE_REVVIT, 2},
        GradCase{"RevViT_PerBlock", petra::v1::ARCHITECTURE_REVVIT, 0},
        GradCase{"ViT_PerBlock", petra::v1::ARCHITECTURE_VIT, 0},
        GradCase{"RevNet18_J2_Bf16", petra::v1::ARCHITECTURE_REVNET18, 2, false,
                 true},
        GradCase{"RevNet18_PerBlock_Bf16", petra::v1::ARCHITECTURE_REVNET18, 0,
                 false, true},
        GradCase{"RevViT_PerBlock_Bf16", petra::v1::ARCHITECTURE_REVVIT, 0,
                 false, true},
        GradCase{"RevNet18_PerBlock_ChannelsLast",
                 petra::v1::ARCHITECTURE_REVNET18, 0, false, false, true},
        GradCase{"RevNet18_PerBlock_Bf16_ChannelsLast",
                 petra::v1::ARCHITECTURE_REVNET18, 0, false, true, true},
        GradCase{"IRevNet18_PerBlock_ChannelsLast",
                 petra::v1::ARCHITECTURE_IREVNET18, 0, false, false, true}),
    [](const auto& info) { return info.param.name; });

// Every row of the paper's Table 4 (which buffers, which weights rebuild)
// gives the exact gradient while the weights stay frozen; what each computes
// once they move is backward_program_test's.
TEST(FrozenWeights, EveryTableFourRowEqualsBackprop) {
  const uint32_t k = 1000;  // never reached: no step
  petra::v1::JobSpec spec = Job(petra::v1::ARCHITECTURE_REVNET18, k);
  std::vector<data::Batch> batches = Batches(6, 8);
  const std::vector<torch::Tensor> exact = ExactGradients(spec, batches);
  struct Row {
    const char* name;
    bool inputs, weights, rebuild_with_current;
  } rows[] = {{"inputs and weights", true, true, false},
              {"inputs", true, false, false},
              {"weights, rebuilt with them", false, true, false},
              {"weights, rebuilt with the current ones", false, true, true}};
  for (const Row& row : rows) {
    auto workers =
        Workers(spec, model::PerBlockPartition(10), row.inputs, row.weights,
                torch::kCPU, false, row.rebuild_with_current);
    RunPetraSchedule(workers, batches);
    std::vector<torch::Tensor> got;
    for (auto& w : workers) {
      for (auto& p : w->parameters()) got.push_back(p.grad() * double(k));
    }
    ASSERT_EQ(got.size(), exact.size());
    EXPECT_LE(WorstRelativeError(got, exact), 1e-4) << row.name;
  }
}

// The same on a GPU (label gpu; skipped without one). Its kernels sum in
// other orders than the CPU backprop whose error sets the bound: the
// margins are the last GPU run's (2026-11-26, against the fp32 CPU
// reference: 1e-4 of the worst parameter for RevNet18, 5.5e-3 for
// i-RevNet18 per block), not yet measured against float64.
INSTANTIATE_TEST_SUITE_P(
    Gpu, FrozenWeights,
    ::testing::Values(GradCase{"RevNet18_J1", petra::v1::ARCHITECTURE_REVNET18,
                               1, true, false, false, 1e-4, 1e-5},
                      GradCase{"RevNet18_J2", petra::v1::ARCHITECTURE_REVNET18,
                               2, true, false, false, 1e-4, 1e-5},
                      GradCase{"RevNet18_PerBlock",
                               petra::v1::ARCHITECTURE_REVNET18, 0, true, false,
                               false, 1e-4, 1e-5},
                      // channels_last: the GPU's default layout for a CNN, and
                      // the layout whose fp32 backprop sets the bound.
                      GradCase{"IRevNet18_PerBlock",
                               petra::v1::ARCHITECTURE_IREVNET18, 0, true,
                               false, true, 1e-2, 1e-3}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace petra::engine
