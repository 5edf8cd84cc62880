// What `petra simulate` prints: the inputs, one row per schedule, and a
// per-stage table per schedule; as text or as one JSON object.
#pragma once

#include <string>
#include <vector>

#include "petra/v1/profile.pb.h"
#include "services/sim/pipeline_sim.h"

namespace petra::client {

struct SimulationInputs {
  // Where the stage costs come from, one line: the profile file, the
  // estimate's model and rate, or the uniform stages.
  std::string source;
  // How the devices were split, when the simulator chose it (empty
  // otherwise).
  std::string note;
  petra::v1::Profile profile;  // the stages simulated
  sim::SimConfig config;       // everything but the schedule
  // The links' rate is --link-bandwidth's default, not the user's: the
  // report says so where a link binds.
  bool default_links = false;
};

struct SimulationRuns {
  sim::SimResult backprop;           // the baseline of every speed-up
  std::vector<sim::SimResult> runs;  // the schedules asked for, in order
};

// `per_stage`: also a table per schedule, stage by stage.
std::string SimulationText(const SimulationInputs& in,
                           const SimulationRuns& runs, bool per_stage);

// {"inputs": {...}, "profile": {...}, "schedules": [{..., "stages": [...]}]}
std::string SimulationJson(const SimulationInputs& in,
                           const SimulationRuns& runs);

}  // namespace petra::client
