// The coordinator's Prometheus metrics, all in this one place: the running
// job's loss, accuracy, epoch, step and learning rate, training samples
// completed, jobs by state, and RPC errors by code. The coordinator runs one
// job at a time, so job gauges carry no job label (ids are unbounded).
// Without a registry every call does nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "petra/v1/coordinator.pb.h"

namespace prometheus {
class Registry;
}

namespace petra::coordinator {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry* registry);
  ~CoordinatorMetrics();

  void Progress(const petra::v1::Progress& p);
  // Training samples whose loss came back from the last stage.
  void TrainSamples(int64_t samples);
  void JobStates(const std::vector<petra::v1::JobState>& states);
  void Error(absl::StatusCode code);
  // A running job lost a stage server and began recovering.
  void Recovery();

 private:
  struct Families;
  std::unique_ptr<Families> f_;
};

}  // namespace petra::coordinator
