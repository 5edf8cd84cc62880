// Following a job on the terminal: progress bar with ETA, loss, accuracy and
// samples/s; a line per epoch; the per-stage table; and the JSON report.
// Shared by `petra watch` and `petra train`.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/coordinator.grpc.pb.h"

namespace petra::client {

class ProgressPrinter {
 public:
  // `json_lines`: every event as one line of JSON (a JobEvent, protobuf's
  // JSON mapping) instead of text, for scripts.
  explicit ProgressPrinter(bool quiet, bool json_lines = false);
  void OnEvent(const petra::v1::JobEvent& event);
  // Epoch-end progress seen so far, in order.
  const std::vector<petra::v1::Progress>& epochs() const { return epochs_; }

 private:
  void EndLine();
  const bool quiet_, json_lines_, tty_;
  bool line_open_ = false;
  petra::v1::JobState state_ = petra::v1::JOB_STATE_UNSPECIFIED;
  std::string activity_;  // the last one printed
  std::chrono::steady_clock::time_point last_line_{};
  std::vector<petra::v1::Progress> epochs_;
};

// Ends a FollowJob from another thread (Ctrl-C): its call is cancelled and
// it returns CANCELLED, also while it waits to reconnect.
class FollowCancel {
 public:
  void Cancel();
  bool cancelled();
  // The call in progress (null: none), cancelled at once if Cancel came.
  void Attach(grpc::ClientContext* context);

 private:
  std::mutex mu_;
  bool cancelled_ = false;
  grpc::ClientContext* context_ = nullptr;
};

struct FollowOptions {
  // How long to keep trying to reach a coordinator that went away (it
  // restarts, or the network broke) before giving up; 0 gives up at once.
  std::chrono::seconds reconnect_timeout{0};
  FollowCancel* cancel = nullptr;
  // Hears "coordinator unreachable, retrying ..." and "reconnected" lines
  // (stderr in the commands); none: silent.
  std::function<void(const std::string&)> say;
};

// Follows job `id` until it ends, printing through `printer`; returns the
// final Job. A coordinator that goes away mid-job (UNAVAILABLE) is asked
// again with backoff (0.5 s doubling to 5 s) for up to
// options.reconnect_timeout, and the job followed on from its state then;
// past that, UNAVAILABLE saying for how long it was tried. Any other
// error of the coordinator (an unknown job, a refused token) at once.
absl::StatusOr<petra::v1::Job> FollowJob(
    petra::v1::CoordinatorService::Stub& stub, const std::string& id,
    ProgressPrinter& printer, const FollowOptions& options = {});

// `m` as one line of JSON (protobuf's JSON mapping, field names as in
// the proto), or pretty-printed over several lines.
std::string JobJson(const google::protobuf::Message& m, bool pretty);

// "running", "succeeded", ...
std::string StateName(petra::v1::JobState state);
std::string Duration(double seconds);

// The share of a stage's training time it was idle, waiting for its next
// operation's input: idle / (forward + backward + idle + send); 0 before
// any. Of several stages (a job): their idle seconds over their time.
double BubbleFraction(const petra::v1::StageStats& stage);
double BubbleFraction(
    const google::protobuf::RepeatedPtrField<petra::v1::StageStats>& stages);

// Where each stage's memory went, how stale its gradients were and how
// much of its time it was idle.
void PrintStageTable(const petra::v1::Job& job);

// The `--report` JSON: test_accuracy, train_loss, samples_per_second,
// wall_seconds, the model's export file, epochs, and stages (memory_bytes by
// kind, staleness_mean).
std::string ReportJson(const petra::v1::Job& job,
                       const std::vector<petra::v1::Progress>& epochs,
                       double wall_seconds, const std::string& runner,
                       const std::string& model_file);

}  // namespace petra::client
