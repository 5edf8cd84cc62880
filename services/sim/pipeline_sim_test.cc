#include "services/sim/pipeline_sim.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace petra::sim {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// J equal stages, free links (no bytes, infinite bandwidth, no latency).
SimConfig Uniform(int stages, double f, double b, int64_t micro_batches,
                  Schedule schedule) {
  SimConfig c;
  c.stages.assign(stages, StageCost{f, b, 0, 0, 0, 0, false});
  c.schedule = schedule;
  c.micro_batches = micro_batches;
  c.micro_batch_size = 1;
  c.link_bandwidth = kInf;
  c.link_latency = 0;
  return c;
}

SimResult Sim(const SimConfig& c) {
  absl::StatusOr<SimResult> r = Simulate(c);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

TEST(ScheduleNames, RoundTrip) {
  for (Schedule s : AllSchedules()) {
    absl::StatusOr<Schedule> parsed = ParseSchedule(ScheduleName(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(ScheduleName(Schedule::kOneFOneB), "1f1b");
  EXPECT_THAT(ParseSchedule("pipedream").status().message(),
              HasSubstr("backprop|gpipe|1f1b|delayed|petra"));
}

TEST(PipelineSim, BackpropIsTheSumOfEveryStageWithFreeLinks) {
  SimConfig c = Uniform(3, 0, 0, 7, Schedule::kBackprop);
  const double f[] = {0.01, 0.02, 0.03}, b[] = {0.04, 0.05, 0.06};
  for (int j = 0; j < 3; ++j) {
    c.stages[j].forward_seconds = f[j];
    c.stages[j].backward_seconds = b[j];
  }
  c.micro_batch_size = 32;
  const SimResult r = Sim(c);
  EXPECT_NEAR(r.makespan_seconds, 7 * 0.21, 1e-12);
  EXPECT_NEAR(r.samples_per_second, 7 * 32 / (7 * 0.21), 1e-9);
  EXPECT_NEAR(r.steady_samples_per_second, 32 / 0.21, 1e-9);
  EXPECT_NEAR(r.stages[2].busy_seconds, 7 * 0.09, 1e-12);
  EXPECT_NEAR(r.stages[2].utilization, 0.09 / 0.21, 1e-12);
  for (const StageResult& s : r.stages) EXPECT_EQ(s.peak_in_flight, 1);
}

TEST(PipelineSim, BackpropPaysEveryTransferAndLatency) {
  SimConfig c = Uniform(3, 0.01, 0.03, 5, Schedule::kBackprop);
  c.link_bandwidth = 1e6;
  c.link_latency = 0.002;
  c.stages[0].output_bytes = 1000;  // 1 ms up
  c.stages[1].input_bytes = 1000;   // 2 ms down (input and gradient)
  c.stages[1].output_bytes = 3000;  // 3 ms up
  c.stages[2].input_bytes = 500;    // 1 ms down
  const double per_micro_batch =
      3 * 0.04 + (0.001 + 0.003) + (0.002 + 0.001) + 4 * 0.002;
  EXPECT_NEAR(Sim(c).makespan_seconds, 5 * per_micro_batch, 1e-12);
}

TEST(PipelineSim, LatencyAddsTwoHopsPerStageBoundaryToBackprop) {
  SimConfig c = Uniform(6, 0.01, 0.02, 9, Schedule::kBackprop);
  const double base = Sim(c).makespan_seconds;
  c.link_latency = 0.005;
  EXPECT_NEAR(Sim(c).makespan_seconds - base, 9 * 2 * 5 * 0.005, 1e-12);
}

TEST(PipelineSim, PetraSteadyStateIsOneForwardAndOneBackward) {
  const int stages = 8;
  const int64_t m = 2000;
  const double f = 0.01, b = 0.03;
  const SimResult petra = Sim(Uniform(stages, f, b, m, Schedule::kPetra));
  const SimResult bp = Sim(Uniform(stages, f, b, m, Schedule::kBackprop));
  EXPECT_NEAR(petra.steady_samples_per_second, 1 / (f + b), 1e-6);
  // No schedule beats (J-1)F + M(F+B) + (J-1)B with free links: the last
  // stage starts after J-1 forwards, works M(F+B), then the last gradient
  // crosses J-1 stages. PETRA meets that bound.
  EXPECT_NEAR(petra.makespan_seconds, (m + stages - 1) * (f + b), 1e-9);
  EXPECT_NEAR(bp.makespan_seconds, m * stages * (f + b), 1e-6);
  const double speedup = petra.samples_per_second / bp.samples_per_second;
  EXPECT_GT(speedup, 0.99 * stages);
  EXPECT_LE(speedup, stages + 1e-9);
  EXPECT_GT(petra.mean_device_utilization, 0.99);
}

TEST(PipelineSim, PetraSpeedUpApproachesTheStageCountAsMicroBatchesGrow) {
  auto speedup = [](int64_t m) {
    const SimResult p = Sim(Uniform(10, 0.01, 0.03, m, Schedule::kPetra));
    const SimResult b = Sim(Uniform(10, 0.01, 0.03, m, Schedule::kBackprop));
    return p.samples_per_second / b.samples_per_second;
  };
  // M J (F+B) / ((M + J - 1)(F+B)).
  EXPECT_NEAR(speedup(10), 100.0 / 19, 1e-9);
  EXPECT_NEAR(speedup(100), 1000.0 / 109, 1e-9);
  EXPECT_NEAR(speedup(3000), 30000.0 / 3009, 1e-9);
  EXPECT_GT(speedup(3000), 9.95);
}

TEST(PipelineSim, OneGroupHasTheGpipeBubble) {
  const int stages = 4;
  const int64_t group = 8;
  const double f = 1, b = 2;
  for (Schedule s : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    SimConfig c = Uniform(stages, f, b, group, s);
    c.group = group;
    const SimResult r = Sim(c);
    EXPECT_NEAR(r.makespan_seconds, (group + stages - 1) * (f + b), 1e-9)
        << ScheduleName(s);
    EXPECT_EQ(r.group, group);
  }
}

TEST(PipelineSim, GroupsFlushOneAfterAnother) {
  const int stages = 3;
  const int64_t group = 5;
  const double f = 1, b = 2, period = (group + stages - 1) * (f + b);
  for (Schedule s : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    SimConfig c = Uniform(stages, f, b, 8 * group, s);
    c.group = group;
    const SimResult r = Sim(c);
    EXPECT_NEAR(r.makespan_seconds, 8 * period, 1e-9) << ScheduleName(s);
    // Whole groups in the middle: the group period, bubble included.
    EXPECT_NEAR(r.steady_samples_per_second, group / period, 1e-9)
        << ScheduleName(s);
  }
}

TEST(PipelineSim, DefaultGroupIsFourPerStageAtMostM) {
  EXPECT_EQ(DefaultGroup(10, 256), 40);
  EXPECT_EQ(DefaultGroup(10, 12), 12);
  EXPECT_EQ(Sim(Uniform(3, 1, 1, 100, Schedule::kGpipe)).group, 12);
  EXPECT_EQ(Sim(Uniform(3, 1, 1, 100, Schedule::kPetra)).group, 0);
}

TEST(PipelineSim, PetraPeakInFlightIsTwiceTheDistanceToTheTop) {
  for (int64_t m : {100, 3}) {
    const SimResult r = Sim(Uniform(6, 0.01, 0.02, m, Schedule::kPetra));
    for (int j = 0; j < 6; ++j) {
      EXPECT_EQ(r.stages[j].peak_in_flight,
                std::min<int64_t>(m, 2 * (6 - 1 - j) + 1))
          << "stage " << j << ", M " << m;
    }
  }
}

TEST(PipelineSim, FlushingSchedulesKeepWholeGroupsOrWarmUps) {
  SimConfig c = Uniform(5, 0.01, 0.02, 40, Schedule::kGpipe);
  c.group = 7;
  // GPipe's last stage backwards each micro-batch with its forward.
  const SimResult g = Sim(c);
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(g.stages[j].peak_in_flight, j == 4 ? 1 : 7) << j;
  }
  c.schedule = Schedule::kOneFOneB;
  const SimResult r = Sim(c);
  for (int j = 0; j < 5; ++j) EXPECT_EQ(r.stages[j].peak_in_flight, 5 - j);
}

TEST(PipelineSim, MemoryByKind) {
  SimConfig c = Uniform(3, 0.01, 0.02, 50, Schedule::kPetra);
  for (StageCost& s : c.stages) {
    s.input_bytes = 1000;
    s.parameters = 100;
  }
  c.stages[1].reversible = true;
  SimResult r = Sim(c);
  // Peaks 5, 3, 1.
  EXPECT_EQ(r.stages[0].input_buffer_bytes, 5000);
  EXPECT_EQ(r.stages[1].input_buffer_bytes, 0);  // rebuilt instead
  EXPECT_EQ(r.stages[2].input_buffer_bytes, 1000);
  EXPECT_EQ(r.stages[0].weight_stash_bytes, 0);
  EXPECT_EQ(r.stages[0].parameter_bytes, 800);
  EXPECT_EQ(r.stages[0].total_bytes, 5800);
  EXPECT_EQ(r.total_bytes, 5800 + 800 + 1800);

  c.schedule = Schedule::kDelayed;
  r = Sim(c);
  EXPECT_EQ(r.stages[1].input_buffer_bytes, 3000);  // kept on every stage
  EXPECT_EQ(r.stages[1].weight_stash_bytes, 3 * 4 * 100);
  EXPECT_EQ(r.stages[1].total_bytes, 3000 + 1200 + 800);

  c.schedule = Schedule::kBackprop;
  r = Sim(c);
  EXPECT_EQ(r.stages[1].input_buffer_bytes, 0);
  EXPECT_EQ(r.stages[0].input_buffer_bytes, 1000);
}

// Forward gradients: PETRA's order, no backward pass, heavier forwards
// (local loss and tangents), guesses kept instead of inputs, tangents on
// the forward links and doubles on the backward ones.
TEST(PipelineSim, ForwardGradientPushesTangentsAndKeepsGuesses) {
  SimConfig c = Uniform(3, 0.01, 0.02, 50, Schedule::kForwardGradient);
  for (StageCost& s : c.stages) {
    s.input_bytes = s.output_bytes = 1000;
    s.parameters = 100;
  }
  SimResult r = Sim(c);
  // Peaks 5, 3, 1 as PETRA's; stage j's forward costs 6 + 2j forwards.
  EXPECT_EQ(r.stages[0].input_buffer_bytes, 0);
  EXPECT_EQ(r.stages[0].weight_stash_bytes, 5 * 4 * 100);
  EXPECT_EQ(r.stages[1].weight_stash_bytes, 3 * 4 * 100);
  EXPECT_EQ(r.stages[2].weight_stash_bytes, 0);
  EXPECT_NEAR(r.stages[0].busy_seconds, 50 * 0.01 * 6, 1e-9);
  EXPECT_NEAR(r.stages[1].busy_seconds, 50 * 0.01 * 8, 1e-9);
  EXPECT_NEAR(r.stages[2].busy_seconds, 50 * 0.03, 1e-9);
  // Stage 1, the slowest, bounds the pipeline.
  EXPECT_NEAR(r.makespan_seconds, 50 * 0.08, 0.2);

  // On a slow link, the forward of stage 1 carries the activation and two
  // tangents: 3000 bytes a micro-batch.
  c.link_bandwidth = 3000 / 0.5;
  r = Sim(c);
  EXPECT_GT(r.makespan_seconds, 50 * 0.5);
  EXPECT_LT(r.makespan_seconds, 50 * 0.5 + 2);
}

TEST(PipelineSim, DelayedUsesTheStoredGraphBackward) {
  SimConfig c = Uniform(4, 0.01, 0.03, 1000, Schedule::kDelayed);
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1 / 0.04, 1e-6);
  for (StageCost& s : c.stages) s.backward_stored_seconds = 0.02;
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1 / 0.03, 1e-6);
  c.schedule = Schedule::kPetra;  // rebuilds: ignores the stored time
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1 / 0.04, 1e-6);
}

// GPipe and 1F1B as mode pipeline runs them: stored graphs (their bytes
// and the stored backward), or recompute, where a reversible stage rebuilds
// and keeps nothing.
TEST(PipelineSim, PipelineModeStoresGraphsOrRecomputes) {
  SimConfig c = Uniform(3, 0.01, 0.03, 48, Schedule::kOneFOneB);
  c.group = 6;
  for (StageCost& s : c.stages) {
    s.input_bytes = 1000;
    s.activation_bytes = 7000;
    s.backward_stored_seconds = 0.02;
    s.reversible = true;
  }
  c.stages[0].reversible = false;  // the stem keeps its input
  SimResult r = Sim(c);
  // Peaks 3, 2, 1; recomputing: the stem's inputs, nothing above it.
  EXPECT_EQ(r.stages[0].input_buffer_bytes, 3000);
  EXPECT_EQ(r.stages[1].input_buffer_bytes, 0);
  EXPECT_NEAR(r.stages[1].busy_seconds, 48 * 0.04, 1e-9);
  c.store_activations = true;
  r = Sim(c);
  EXPECT_EQ(r.stages[0].input_buffer_bytes, 3 * 7000);
  EXPECT_EQ(r.stages[1].input_buffer_bytes, 2 * 7000);
  EXPECT_NEAR(r.stages[1].busy_seconds, 48 * 0.03, 1e-9);
  // A forward that records its graph costs its own time where measured,
  // in the stored schedules only.
  for (StageCost& s : c.stages) s.forward_stored_seconds = 0.015;
  EXPECT_NEAR(Sim(c).stages[1].busy_seconds, 48 * 0.035, 1e-9);
  c.store_activations = false;
  EXPECT_NEAR(Sim(c).stages[1].busy_seconds, 48 * 0.04, 1e-9);
  c.store_activations = true;
  for (StageCost& s : c.stages) s.forward_stored_seconds = 0;
  // Unknown graph bytes: the inputs, at least.
  c.stages[1].activation_bytes = 0;
  EXPECT_EQ(Sim(c).stages[1].input_buffer_bytes, 2 * 1000);
  // PETRA ignores it: it rebuilds.
  c.schedule = Schedule::kPetra;
  EXPECT_EQ(Sim(c).stages[1].input_buffer_bytes, 0);
}

TEST(PipelineSim, ASlowLinkBoundsThePipeline) {
  SimConfig c = Uniform(2, 1, 1, 200, Schedule::kPetra);
  c.link_bandwidth = 1e6;
  c.stages[0].output_bytes = 3'000'000;  // 3 s per message up
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1.0 / 3, 1e-9);
}

// Links of their own: only the slow one (across hosts, say) bounds it, in
// whichever direction it carries more.
TEST(PipelineSim, EachLinkHasItsOwnBandwidth) {
  SimConfig c = Uniform(3, 1, 1, 200, Schedule::kPetra);
  c.stages[0].output_bytes = c.stages[1].output_bytes = 3'000'000;
  c.stages[1].input_bytes = c.stages[2].input_bytes = 3'000'000;
  c.link_bandwidths = {kInf, 1e6};  // the backward: 6 s a message
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1.0 / 6, 1e-9);
  c.link_bandwidths = {1e6, kInf};
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1.0 / 6, 1e-9);
  c.link_bandwidths = {kInf, kInf};
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1.0 / 2, 1e-9);
}

// Two hosts of two devices: only the link between stages 1 and 2 crosses.
TEST(PipelineSim, OnlyLinksBetweenHostsTakeTheCrossHostBandwidth) {
  SimConfig c = Uniform(4, 1, 1, 200, Schedule::kPetra);
  for (int j = 0; j < 4; ++j) {
    c.stages[j].input_bytes = c.stages[j].output_bytes = 3'000'000;
  }
  c.link_bandwidth = kInf;
  c.devices_per_host = 2;
  c.cross_host_bandwidth = 1e6;  // 6 s a backward message across
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1.0 / 6, 1e-9);
  c.devices_per_host = 4;  // one host
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1.0 / 2, 1e-9);
  c.cross_host_bandwidth = 0;
  EXPECT_THAT(Simulate(c).status().message(),
              HasSubstr("cross-host bandwidth = 0"));
}

TEST(PipelineSim, TheSlowestStageSetsThePace) {
  SimConfig c = Uniform(4, 0.01, 0.02, 2000, Schedule::kPetra);
  c.stages[2].backward_seconds = 0.1;
  EXPECT_NEAR(Sim(c).steady_samples_per_second, 1 / 0.11, 1e-6);
}

TEST(PipelineSim, StagesSharingADeviceAreNoFasterThanOneStage) {
  const double f[] = {0.01, 0.03}, b[] = {0.05, 0.02};
  for (Schedule s : AllSchedules()) {
    SimConfig two = Uniform(2, 0, 0, 64, s);
    for (int j = 0; j < 2; ++j) {
      two.stages[j].forward_seconds = f[j];
      two.stages[j].backward_seconds = b[j];
    }
    two.stage_devices = {0, 0};
    const SimConfig one = Uniform(1, f[0] + f[1], b[0] + b[1], 64, s);
    const SimResult shared = Sim(two), single = Sim(one);
    EXPECT_EQ(shared.devices, 1);
    EXPECT_GE(shared.makespan_seconds, single.makespan_seconds - 1e-9)
        << ScheduleName(s);
    EXPECT_LE(shared.mean_device_utilization, 1 + 1e-12);
    two.devices = 1;  // the same through the contiguous mapping
    two.stage_devices.clear();
    EXPECT_NEAR(Sim(two).makespan_seconds, shared.makespan_seconds, 1e-12);
  }
}

TEST(PipelineSim, ContiguousDeviceMapping) {
  SimConfig c = Uniform(5, 0.01, 0.02, 20, Schedule::kPetra);
  c.devices = 2;
  const SimResult r = Sim(c);
  EXPECT_EQ(r.devices, 2);
  const int want[] = {0, 0, 0, 1, 1};
  for (int j = 0; j < 5; ++j) EXPECT_EQ(r.stages[j].device, want[j]);
  // Two devices do the work of five stages: about 2/5 of the speed.
  const SimResult five = Sim(Uniform(5, 0.01, 0.02, 20, Schedule::kPetra));
  EXPECT_LT(r.samples_per_second, 0.75 * five.samples_per_second);
}

TEST(PipelineSim, OneStageIsPlainBackprop) {
  for (Schedule s : AllSchedules()) {
    SimConfig c = Uniform(1, 0.01, 0.02, 10, s);
    EXPECT_NEAR(Sim(c).makespan_seconds, 10 * 0.03, 1e-12) << ScheduleName(s);
  }
}

TEST(PipelineSim, LargeFleetIsFast) {
  const auto start = std::chrono::steady_clock::now();
  const int stages = 64;
  const int64_t m = 4000;
  double petra = 0, backprop = 0;
  for (Schedule s : AllSchedules()) {
    SimConfig c = Uniform(stages, 0.01, 0.03, m, s);
    c.link_bandwidth = 1e9;
    c.link_latency = 1e-4;
    for (StageCost& st : c.stages) st.input_bytes = st.output_bytes = 1 << 20;
    const SimResult r = Sim(c);
    if (s == Schedule::kPetra) petra = r.samples_per_second;
    if (s == Schedule::kBackprop) backprop = r.samples_per_second;
  }
  EXPECT_GT(petra / backprop, 55);
  EXPECT_LT(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      20.0);
}

TEST(PipelineSim, RejectsInvalidInputs) {
  auto error = [](const SimConfig& c) {
    absl::StatusOr<SimResult> r = Simulate(c);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  const SimConfig ok = Uniform(3, 0.01, 0.02, 10, Schedule::kPetra);
  SimConfig c = ok;
  c.stages.clear();
  EXPECT_THAT(error(c), HasSubstr("at least one stage"));
  c = ok;
  c.stages[1].forward_seconds = -1;
  EXPECT_THAT(error(c), HasSubstr("stage 1: forward_seconds"));
  c = ok;
  c.stages[2].backward_seconds = std::nan("");
  EXPECT_THAT(error(c), HasSubstr("stage 2: backward_seconds"));
  c = ok;
  c.stages[0].backward_stored_seconds = kInf;
  EXPECT_THAT(error(c), HasSubstr("backward_stored_seconds"));
  c = ok;
  c.stages[1].forward_stored_seconds = -1;
  EXPECT_THAT(error(c), HasSubstr("stage 1: forward_stored_seconds"));
  c = ok;
  c.stages[0].input_bytes = -5;
  EXPECT_THAT(error(c), HasSubstr("input_bytes"));
  c = ok;
  c.link_bandwidths = {1e9};
  EXPECT_THAT(error(c), HasSubstr("link bandwidths: 1 entries for 2 links"));
  c.link_bandwidths = {1e9, 0};
  EXPECT_THAT(error(c), HasSubstr("link 1 bandwidth = 0"));
  c = ok;
  c.stages[0].parameters = -1;
  EXPECT_THAT(error(c), HasSubstr("parameters"));
  c = ok;
  c.micro_batches = 0;
  EXPECT_THAT(error(c), HasSubstr("micro-batches"));
  c = ok;
  c.micro_batches = int64_t{1} << 40;
  EXPECT_THAT(error(c), HasSubstr("too large"));
  c = ok;
  c.micro_batch_size = 0;
  EXPECT_THAT(error(c), HasSubstr("micro-batch size"));
  c = ok;
  c.group = -2;
  EXPECT_THAT(error(c), HasSubstr("group"));
  c = ok;
  c.devices = 4;
  EXPECT_THAT(error(c), HasSubstr("devices = 4"));
  c = ok;
  c.stage_devices = {0, 1};
  EXPECT_THAT(error(c), HasSubstr("2 entries for 3 stages"));
  c = ok;
  c.stage_devices = {0, 1, 3};
  EXPECT_THAT(error(c), HasSubstr("stage 2 on device 3"));
  c = ok;
  c.devices = 2;
  c.stage_devices = {0, 1, 2};
  EXPECT_THAT(error(c), HasSubstr("must be in [0, 2)"));
  c = ok;
  c.stage_devices = {0, -1, 0};
  EXPECT_THAT(error(c), HasSubstr("stage 1 on device -1"));
  c = ok;
  c.link_bandwidth = 0;
  EXPECT_THAT(error(c), HasSubstr("link bandwidth"));
  c = ok;
  c.link_bandwidth = std::nan("");
  EXPECT_THAT(error(c), HasSubstr("link bandwidth"));
  c = ok;
  c.link_latency = -1e-3;
  EXPECT_THAT(error(c), HasSubstr("link latency"));
  c = Uniform(3, 0, 0, 10, Schedule::kPetra);
  EXPECT_THAT(error(c), HasSubstr("takes no time"));
}

}  // namespace
}  // namespace petra::sim

namespace petra::sim {
namespace {

// Replicas run side by side: R copies of M / R micro-batches each take as
// long as one pipeline of M / R, and give R times its samples.
TEST(PipelineSimReplicas, CopiesWithNothingToAverageScaleTheRate) {
  SimConfig one = Uniform(4, 0.01, 0.02, 32, Schedule::kPetra);
  SimConfig four = one;
  four.micro_batches = 128;
  four.replicas = 4;
  const SimResult a = Sim(one), b = Sim(four);
  EXPECT_EQ(b.replicas, 4);
  EXPECT_EQ(b.devices, 4);
  EXPECT_DOUBLE_EQ(b.makespan_seconds, a.makespan_seconds);
  EXPECT_DOUBLE_EQ(b.samples_per_second, 4 * a.samples_per_second);
  EXPECT_DOUBLE_EQ(b.steady_samples_per_second,
                   4 * a.steady_samples_per_second);
  EXPECT_EQ(b.stages[0].allreduce_seconds, 0);
}

// Each stage all-reduces every k of its backwards: a ring moves
// 2 (R - 1) / R of its float32 gradients each way and waits 2 (R - 1)
// latencies.
TEST(PipelineSimReplicas, TheAllReduceCostsTheRingEveryKBackwards) {
  SimConfig c = Uniform(2, 0.01, 0.02, 64, Schedule::kPetra);
  for (StageCost& s : c.stages) s.parameters = 1000000;
  c.replicas = 4;
  c.accumulation = 2;
  c.link_bandwidth = 1e9;
  c.link_latency = 1e-5;
  const SimResult r = Sim(c);
  // 16 micro-batches a replica, 8 steps, each 6 MB at 1 GB/s + 6 latencies.
  const double each = 0.75 * 2 * 4e6 / 1e9 + 6 * 1e-5;
  for (const StageResult& s : r.stages) {
    EXPECT_NEAR(s.allreduce_seconds, 8 * each, 1e-12);
    EXPECT_NEAR(s.busy_seconds, 16 * 0.03 + 8 * each, 1e-12);
  }
  // Given its own bandwidth, it takes that instead.
  c.allreduce_bandwidth = 1e8;
  EXPECT_NEAR(Sim(c).stages[1].allreduce_seconds,
              8 * (0.75 * 2 * 4e6 / 1e8 + 6 * 1e-5), 1e-12);
  // Across hosts by default once the copies span more than one.
  c.allreduce_bandwidth = 0;
  c.devices_per_host = 4;
  c.cross_host_bandwidth = 1e7;
  EXPECT_NEAR(Sim(c).stages[0].allreduce_seconds,
              8 * (0.75 * 2 * 4e6 / 1e7 + 6 * 1e-5), 1e-12);
}

// The run names what binds it: compute, the all-reduce or a link.
TEST(PipelineSimReplicas, TheBoundIsNamed) {
  SimConfig c = Uniform(2, 0.01, 0.03, 32, Schedule::kPetra);
  c.stages[1].backward_seconds = 0.05;
  EXPECT_EQ(Sim(c).bound, "compute, stage 1");
  c.stages[0].output_bytes = 1000000;
  c.link_bandwidth = 1e7;  // 0.1 s a message
  const SimResult linked = Sim(c);
  EXPECT_EQ(linked.bound, "link 0 -> 1 at 10 MB/s");
  EXPECT_NEAR(linked.bound_seconds, 32 * 0.1, 1e-9);
  c.stages[0].output_bytes = 0;
  c.replicas = 2;
  c.micro_batches = 64;
  for (StageCost& s : c.stages) s.parameters = 100000000;  // 0.4 s a step
  c.link_bandwidth = 1e9;
  EXPECT_THAT(Sim(c).bound, HasSubstr("the all-reduce, stage"));
}

TEST(PipelineSimReplicas, BadReplicaSettingsAreRefused) {
  SimConfig c = Uniform(2, 0.01, 0.02, 4, Schedule::kPetra);
  c.replicas = 0;
  EXPECT_THAT(Simulate(c).status().message(), HasSubstr("replicas = 0"));
  c.replicas = 8;
  EXPECT_THAT(Simulate(c).status().message(),
              HasSubstr("4 micro-batches for 8 replicas"));
  c.replicas = 2;
  c.accumulation = 0;
  EXPECT_THAT(Simulate(c).status().message(), HasSubstr("accumulation = 0"));
  c.accumulation = 1;
  c.allreduce_bandwidth = -1;
  EXPECT_THAT(Simulate(c).status().message(),
              HasSubstr("all-reduce bandwidth"));
}

}  // namespace
}  // namespace petra::sim
