#include "services/engine/stage_report.h"

namespace petra::engine {

StageReport ReportOf(const StageWorker& w, const model::BlockRange& blocks) {
  StageReport s;
  s.index = w.index();
  s.blocks = blocks;
  s.rebuilds_input = w.rebuilds_input();
  s.memory = w.memory();
  s.delay_ticks_mean = w.delay_ticks_mean();
  s.staleness_mean = w.staleness_mean();
  s.forward_count = w.forward_count();
  s.backward_count = w.backward_count();
  s.forward_seconds = w.forward_seconds();
  s.backward_seconds = w.backward_seconds();
  s.idle_seconds = w.idle_seconds();
  s.send_seconds = w.send_seconds();
  s.optimizer_steps = w.optimizer_steps();
  s.in_flight = w.in_flight();
  s.skipped = w.skipped_count();
  s.end_to_end = w.end_to_end();
  s.rebuild_error = w.rebuild_error();
  s.allreduce_seconds = w.allreduce_seconds();
  s.allreduce_bytes = w.allreduce_bytes();
  s.replica_mismatches = w.replica_mismatches();
  return s;
}

petra::v1::MemoryBreakdown ToProto(const MemoryStats& m) {
  petra::v1::MemoryBreakdown p;
  p.set_parameters_bytes(m.parameters_bytes);
  p.set_optimizer_state_bytes(m.optimizer_state_bytes);
  p.set_activation_buffer_bytes(m.activation_buffer_bytes);
  p.set_weight_stash_bytes(m.weight_stash_bytes);
  p.set_peak_bytes(m.peak_bytes);
  p.set_device_bytes(m.device_bytes);
  p.set_device_reserved_bytes(m.device_reserved_bytes);
  p.set_device_peak_bytes(m.device_peak_bytes);
  p.set_host_tensor_bytes(m.host_tensor_bytes);
  p.set_host_tensor_peak_bytes(m.host_tensor_peak_bytes);
  p.set_host_tensor_train_peak_bytes(m.host_tensor_train_peak_bytes);
  return p;
}

petra::v1::StageStats ToProto(const StageReport& r) {
  petra::v1::StageStats s;
  s.set_stage_index(r.index);
  s.set_forward_count(r.forward_count);
  s.set_backward_count(r.backward_count);
  s.set_forward_seconds(r.forward_seconds);
  s.set_backward_seconds(r.backward_seconds);
  s.set_idle_seconds(r.idle_seconds);
  s.set_send_seconds(r.send_seconds);
  s.set_optimizer_steps(r.optimizer_steps);
  s.set_in_flight(static_cast<uint32_t>(r.in_flight));
  s.set_delay_ticks_mean(r.delay_ticks_mean);
  s.set_staleness_mean(r.staleness_mean);
  s.set_skipped_micro_batches(static_cast<uint64_t>(r.skipped));
  *s.mutable_memory() = ToProto(r.memory);
  if (r.end_to_end.samples > 0) {
    s.set_end_to_end_samples(static_cast<uint32_t>(r.end_to_end.samples));
    s.set_end_to_end_cosine_similarity(r.end_to_end.cosine_similarity_mean);
    s.set_end_to_end_norm_ratio(r.end_to_end.norm_ratio_mean);
  }
  if (r.rebuild_error.samples > 0) {
    s.set_rebuild_error_samples(static_cast<uint32_t>(r.rebuild_error.samples));
    s.set_rebuild_error_mean(r.rebuild_error.mean);
    s.set_rebuild_error_max(r.rebuild_error.max);
  }
  s.set_allreduce_seconds(r.allreduce_seconds);
  s.set_allreduce_bytes(static_cast<uint64_t>(r.allreduce_bytes));
  s.set_replica_mismatches(static_cast<uint64_t>(r.replica_mismatches));
  return s;
}

}  // namespace petra::engine
