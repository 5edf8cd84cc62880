// What a stage worker did and holds, taken at one moment, and the same as the
// StageStats message that status calls, progress events and reports carry:
// one conversion for the in-process runner and the stage server alike.
#pragma once

#include <cstdint>

#include "petra/v1/common.pb.h"
#include "services/engine/stage_worker.h"
#include "services/model/partition.h"

namespace petra::engine {

struct StageReport {
  int index = 0;
  model::BlockRange blocks;
  bool rebuilds_input = false;
  MemoryStats memory;
  double delay_ticks_mean = 0;
  double staleness_mean = 0;
  int64_t forward_count = 0;
  int64_t backward_count = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
  double idle_seconds = 0;
  double send_seconds = 0;
  int64_t optimizer_steps = 0;
  int64_t in_flight = 0;
  int64_t skipped = 0;  // micro-batches skipped for NaN or Inf
  EndToEndSummary end_to_end;
  RebuildErrorSummary rebuild_error;
  // With replicas: the all-reduce's time and bytes (replica_group.h).
  double allreduce_seconds = 0;
  int64_t allreduce_bytes = 0;
  int64_t replica_mismatches = 0;
};

StageReport ReportOf(const StageWorker& worker,
                     const model::BlockRange& blocks);

// Memory as the wire carries it (process RSS left unset).
petra::v1::MemoryBreakdown ToProto(const MemoryStats& memory);
petra::v1::StageStats ToProto(const StageReport& report);

}  // namespace petra::engine
