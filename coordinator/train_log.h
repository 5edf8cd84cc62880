// jobs/<id>/train_log.csv: every training micro-batch's loss, for plots and
// for comparing runners (epoch, micro-batch of the epoch, optimizer step it
// counted towards, loss).
#pragma once

#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace petra::coordinator {

class TrainLog {
 public:
  explicit TrainLog(std::filesystem::path path) : path_(std::move(path)) {}

  // Appends one epoch's losses, by micro-batch id; `steps_before` steps were
  // taken before the epoch and `k` micro-batches make a step.
  absl::Status Append(uint32_t epoch, uint64_t steps_before, uint64_t k,
                      std::vector<std::pair<int64_t, double>> losses) const;
  // Drops the rows of epochs after `epochs` (to be trained again). A crash
  // part-way leaves the old file whole.
  absl::Status Trim(uint32_t epochs) const;

 private:
  std::filesystem::path path_;
};

}  // namespace petra::coordinator
