// Where the stream reactors leave whole micro-batches for the stage's
// executor, and the per-message checks that decide what a stream may
// deliver: the job's current pass, ids in range, no duplicates, the right
// sender. A refused message gets an error on its own stream and the stream
// goes on. No gRPC here: replies go through the ReplySink interface.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "petra/v1/stage.pb.h"
#include "services/engine/device_transfer.h"
#include "services/engine/stage_io.h"
#include "services/schedule/training_mode.h"
#include "services/wire/stage_messages.h"

namespace petra::stage_server {

// The reply half of one incoming stream. Send never blocks; replies to a
// stream that has ended are dropped.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  virtual void Send(petra::v1::StreamReply reply) = 0;
};

// A pass as the coordinator started it.
struct PassInfo {
  petra::v1::Phase phase = petra::v1::PHASE_TRAIN;
  uint32_t epoch = 0;
  int64_t micro_batches = 0;
  uint64_t generation = 0;  // set by StageMailbox::BeginPass
};

class StageMailbox : public engine::StageInbox {
 public:
  // `window`: the credits a stream is granted (0: unchecked). A sender that
  // keeps to its credits never sends a micro-batch `window` or more ahead of
  // the one the stage takes next; one that does is refused, so a peer
  // ignoring its credits cannot fill the stage's memory.
  // `traffic`: what the job's mode sends beside the activations and
  // gradients (training_mode.h); anything else is refused.
  // `credit_batch`: credits a stream is owed before they are sent, in one
  // reply (at most window / 2; the pass's last micro-batch and its end send
  // what is owed). Each credit reply is a message whose cost a small
  // micro-batch does not amortise; a sender owed fewer than that still has
  // credits for the micro-batch the stage takes next.
  StageMailbox(int stage_index, int stage_count, uint32_t window = 0,
               schedule::ModeTraffic traffic = {}, uint32_t credit_batch = 1);

  // Resets the expectations for a new pass. Items of an earlier pass that
  // were never taken are dropped. Returns the pass's generation.
  uint64_t BeginPass(const PassInfo& pass);
  // Ends pass `generation` once its stage is done with it: later messages
  // are refused until the next BeginPass, and anything left is dropped. A
  // newer pass already begun is left alone (the coordinator may start the
  // next pass while this stage is still finishing its sends).
  void EndPass(uint64_t generation);
  // Wakes every waiter with CANCELLED; later deliveries are refused.
  void Close(const std::string& why);

  // From the reactors. OK when the micro-batch was accepted; otherwise the
  // reason, for a MessageError on `from`. `arrival`: the payload's copies to
  // the stage's device, still under way (device_transfer.h).
  absl::Status Deliver(model::ForwardBatch payload,
                       std::shared_ptr<ReplySink> from,
                       engine::Transfer arrival = {});
  absl::Status Deliver(model::BackwardBatch payload,
                       std::shared_ptr<ReplySink> from,
                       engine::Transfer arrival = {});

  // StageInbox, for the executor. Takes the item, grants its senders one
  // credit each, and has the executor's stream wait for its copies.
  absl::StatusOr<model::ForwardBatch> NextForward(int64_t id) override;
  absl::StatusOr<model::BackwardBatch> NextBackward(int64_t id) override;

  // Where to report: the stream that brought the labels of the current pass
  // (last stage) and the one that brought the data (first stage).
  std::shared_ptr<ReplySink> labels_sink();
  std::shared_ptr<ReplySink> data_sink();

 private:
  // A micro-batch waiting for the executor, and whom to credit for it. A
  // forward's activation and labels may come on two streams.
  struct ForwardSlot {
    model::ForwardBatch batch;
    bool has_x = false;
    bool has_labels = false;
    std::vector<std::shared_ptr<ReplySink>> senders;
    std::vector<engine::Transfer> arrivals;
  };
  struct BackwardSlot {
    model::BackwardBatch batch;
    std::shared_ptr<ReplySink> sender;
    engine::Transfer arrival;
  };

  absl::Status CheckId(uint64_t id, int64_t next, const char* direction) const;
  // Counts a credit owed to `to` for a micro-batch taken (the pass's last
  // when `last`); returns the replies due now, sent by the caller outside
  // the lock.
  using DueCredits =
      std::vector<std::pair<std::shared_ptr<ReplySink>, uint32_t>>;
  void Owe(const std::shared_ptr<ReplySink>& to, bool last, DueCredits& due);
  static void SendCredits(const DueCredits& due);
  // The credits of micro-batch `id`, just taken, owed to its senders; sends
  // those that are due.
  void Repay(const std::vector<std::shared_ptr<ReplySink>>& senders,
             int64_t id);
  // Ids on a stream increase: `id` must be above `last`, the highest id of
  // that kind accepted in this pass (-1 for none).
  static absl::Status CheckOrder(uint64_t id, int64_t last, const char* what);
  bool ForwardReady(const ForwardSlot& s) const;
  template <typename Map, typename Ready>
  absl::StatusOr<typename Map::mapped_type> Take(Map& map, int64_t id,
                                                 int64_t& next, Ready ready,
                                                 bool backward);

  const int index_, count_;
  const uint32_t window_;
  const schedule::ModeTraffic traffic_;
  const uint32_t credit_batch_;
  // Credits owed to each stream not yet sent (a handful of streams).
  DueCredits owed_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_pass_ = false;
  uint64_t generation_ = 0;
  bool closed_ = false;
  std::string closed_why_;
  PassInfo pass_;
  int64_t next_forward_ = 0, next_backward_ = 0;
  // Highest ids accepted this pass: activations, labels, gradients.
  int64_t last_x_ = -1, last_labels_ = -1, last_backward_ = -1;
  std::map<int64_t, ForwardSlot> forward_;
  std::map<int64_t, BackwardSlot> backward_;
  std::shared_ptr<ReplySink> labels_sink_, data_sink_;
};

// A reply granting `n` credits.
petra::v1::StreamReply CreditReply(uint32_t n);
// A reply refusing micro-batch `id`.
petra::v1::StreamReply ErrorReply(uint64_t id, const absl::Status& status);

}  // namespace petra::stage_server
