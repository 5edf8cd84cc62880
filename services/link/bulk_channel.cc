#include "services/link/bulk_channel.h"

#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <deque>
#include <iostream>
#include <map>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/link/bulk_frame.h"
#include "services/link/payload_layout.h"
#include "services/wire/data_key.h"
#include "services/wire/tensor_validation.h"

namespace petra::link {
namespace {

constexpr char kPushMethod[] = "/petra.v1.BulkService/Push";
constexpr auto kTick = std::chrono::milliseconds(50);

uint64_t RandomLink() {
  std::random_device r;
  return (uint64_t{r()} << 32) ^ r();
}

}  // namespace

// What the placer's thread and gRPC's threads share.
struct GrpcBulkPlacer::State {
  std::mutex mu;
  std::condition_variable cv;
  int64_t unacked = 0;   // frames sent and not yet acknowledged
  int64_t held = 0;      // frames whose memory gRPC still refers to
  bool broken = false;   // a stream stopped reading: the call is over
  int streams_done = 0;  // streams whose OnDone ran
  absl::Status end;      // why the first stream that ended on its own did
  absl::Status error;    // the first failure; Place fails from then on

  static void Release(void* self) {
    auto* s = static_cast<State*>(self);
    std::lock_guard<std::mutex> lock(s->mu);
    --s->held;
    s->cv.notify_all();
  }
};

namespace {

absl::Status StreamEnded(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return absl::FailedPreconditionError(
        "the receiver does not serve petra.v1.BulkService (a "
        "petra-stage-server older than transport grpc_bulk?)");
  }
  return absl::UnavailableError(
      absl::StrCat("a bulk stream to the receiver ended: ",
                   status.error_message().empty() ? "no reason given"
                                                  : status.error_message(),
                   " (gRPC code ", status.error_code(), ")"));
}

}  // namespace

// One stream to the receiver's BulkService: frames out (one write in
// flight, the rest queued), acknowledgements in. A hold keeps the call
// (and so StartWrite) valid until the placer lets go of it in Release().
class GrpcBulkPlacer::Stream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Stream(State& state, const std::shared_ptr<grpc::Channel>& channel,
         const std::string& data_key)
      : state_(state), stub_(channel) {
    wire::PresentDataKey(&context_, data_key);
    stub_.PrepareBidiStreamingCall(&context_, kPushMethod, grpc::StubOptions(),
                                   this);
    AddHold();
    StartRead(&ack_);
    StartCall();
  }

  void Send(grpc::ByteBuffer frame) {
    grpc::ByteBuffer* first = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      queue_.push_back(std::move(frame));  // keeps references to the others
      if (writing_) return;
      writing_ = true;
      first = &queue_.front();
    }
    StartWrite(first);
  }

  // Cancels the call and lets it end (once).
  void Release() {
    if (released_) return;
    released_ = true;
    context_.TryCancel();
    RemoveHold();
  }

  void OnWriteDone(bool ok) override {
    // Destroyed outside the lock: dropping a frame may call State::Release.
    std::deque<grpc::ByteBuffer> dropped;
    grpc::ByteBuffer* next = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      dropped.push_back(std::move(queue_.front()));
      queue_.pop_front();
      if (!ok) {
        // The call is over; OnReadDone(false) says so.
        for (grpc::ByteBuffer& b : queue_) dropped.push_back(std::move(b));
        queue_.clear();
      }
      if (queue_.empty()) {
        writing_ = false;
      } else {
        next = &queue_.front();
      }
    }
    if (next != nullptr) StartWrite(next);
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      if (ok) {
        --state_.unacked;
      } else {
        state_.broken = true;
      }
      state_.cv.notify_all();
    }
    if (!ok) return;
    ack_.Clear();
    StartRead(&ack_);
  }

  void OnDone(const grpc::Status& status) override {
    std::deque<grpc::ByteBuffer> dropped;  // destroyed after the lock
    std::lock_guard<std::mutex> lock(state_.mu);
    dropped.swap(queue_);
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED &&
        state_.end.ok()) {
      state_.end = StreamEnded(status);
    }
    ++state_.streams_done;
    state_.cv.notify_all();
  }

 private:
  State& state_;
  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::ByteBuffer ack_;
  std::deque<grpc::ByteBuffer> queue_;  // front: being written
  bool writing_ = false;
  bool released_ = false;  // the placer's thread only
};

GrpcBulkPlacer::GrpcBulkPlacer(BulkConnector connect,
                               std::function<absl::Status()> keep_going,
                               std::string data_key, int connections,
                               uint64_t frame_bytes)
    : connect_(std::move(connect)),
      keep_going_(std::move(keep_going)),
      data_key_(std::move(data_key)),
      connections_(std::max(connections, 1)),
      frame_bytes_(std::max<uint64_t>(frame_bytes, 1)),
      link_(RandomLink()),
      state_(std::make_shared<State>()) {}

GrpcBulkPlacer::~GrpcBulkPlacer() {
  Abort(absl::CancelledError("the link was closed"));
}

void GrpcBulkPlacer::Cancel() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->error.ok()) {
    state_->error = absl::CancelledError("the link was cancelled");
  }
  state_->cv.notify_all();
}

absl::Status GrpcBulkPlacer::Open() {
  if (!streams_.empty()) return absl::OkStatus();
  for (int i = 0; i < connections_; ++i) {
    std::shared_ptr<grpc::Channel> channel = connect_(i);
    if (channel == nullptr) {
      return absl::InternalError("no channel to the receiver's BulkService");
    }
    streams_.push_back(std::make_unique<Stream>(*state_, channel, data_key_));
  }
  return absl::OkStatus();
}

void GrpcBulkPlacer::Abort(absl::Status why) {
  if (streams_.empty()) {  // never opened, or aborted before
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->error.ok()) state_->error = why;
    return;
  }
  for (const std::unique_ptr<Stream>& s : streams_) s->Release();
  std::unique_lock<std::mutex> lock(state_->mu);
  const int streams = static_cast<int>(streams_.size());
  // gRPC lets go of cancelled calls' memory promptly; a minute means it
  // never will, and the memory is leaked rather than freed under it.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::minutes(1);
  bool clean = state_->cv.wait_until(
      lock, deadline, [&] { return state_->streams_done == streams; });
  if (clean && state_->held > 0) {
    // Every call is over, yet a frame is still held: in a connection's
    // write buffer, which goes with the connection (seen once in 50 runs
    // after the receiver shut down mid-link). The streams and their
    // channels go now, and their connections with them.
    lock.unlock();
    streams_.clear();
    lock.lock();
    clean = state_->cv.wait_until(lock, deadline,
                                  [&] { return state_->held == 0; });
  }
  // The receiver's reason, when a stream ended on its own, says more than
  // ours.
  if (state_->error.ok()) state_->error = state_->end.ok() ? why : state_->end;
  if (!clean) {
    std::cerr << "grpc_bulk: gRPC still holds " << state_->held
              << " frames a minute after the link ended; leaking them\n";
    new std::shared_ptr<State>(state_);
    lock.unlock();
    for (std::unique_ptr<Stream>& s : streams_) s.release();
    // A second Abort (the destructor's after Place's) finds nothing to
    // cancel: it once called Release on the released pointers.
    streams_.clear();
  }
}

absl::StatusOr<std::vector<petra::v1::SlotRef>> GrpcBulkPlacer::Place(
    const std::vector<wire::PayloadPiece>& pieces) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->error.ok()) return state_->error;
  }
  if (absl::Status s = Open(); !s.ok()) return s;
  const uint64_t sequence = ++sequence_;
  const PayloadLayout layout = LayOut(pieces);
  std::vector<petra::v1::SlotRef> refs;
  for (uint64_t offset : layout.offsets) {
    petra::v1::SlotRef& r = refs.emplace_back();
    r.set_ring(absl::StrCat(kBulkRingPrefix, link_));
    r.set_offset(offset);
    r.set_sequence(sequence);
  }
  struct Frame {
    const uint8_t* data;
    uint64_t bytes, offset;
  };
  std::vector<Frame> frames;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto* data = static_cast<const uint8_t*>(pieces[i].data);
    for (uint64_t o = 0; o < pieces[i].bytes; o += frame_bytes_) {
      frames.push_back({data + o, std::min(frame_bytes_, pieces[i].bytes - o),
                        refs[i].offset() + o});
    }
  }
  if (frames.empty()) return refs;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->unacked += static_cast<int64_t>(frames.size());
    state_->held += static_cast<int64_t>(frames.size());
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    streams_[i % streams_.size()]->Send(EncodeBulkFrame(
        {link_, sequence, f.offset, layout.total, layout.payload}, f.data,
        f.bytes, &State::Release, state_.get()));
  }
  // Done when every frame is acknowledged and gRPC refers to none of them
  // (the pieces are the caller's again).
  while (true) {
    absl::Status failed;
    {
      std::unique_lock<std::mutex> lock(state_->mu);
      if (state_->cv.wait_for(lock, kTick, [&] {
            return (state_->unacked == 0 && state_->held == 0) ||
                   !state_->error.ok() || state_->broken;
          })) {
        if (state_->error.ok() && !state_->broken) return refs;
        failed =
            !state_->error.ok()
                ? state_->error
                : absl::UnavailableError("a bulk stream to the receiver ended");
      }
    }
    if (failed.ok() && keep_going_) failed = keep_going_();
    if (!failed.ok()) {
      Abort(failed);
      std::lock_guard<std::mutex> lock(state_->mu);
      return state_->error;
    }
  }
}

bool IsBulkRing(const std::string& ring) {
  return absl::StartsWith(ring, kBulkRingPrefix);
}

absl::Status BulkFetcher::Fetch(std::vector<Field>& fields,
                                const wire::TensorLimits& limits) {
  absl::Status status;
  auto fail = [&](const Field& f, absl::StatusCode code,
                  absl::string_view why) {
    if (status.ok())
      status = absl::Status(code, absl::StrCat(f.name, ": ", why));
  };
  // Each micro-batch's payload, taken once for all its fields.
  std::map<std::pair<uint64_t, uint64_t>,
           absl::StatusOr<std::pair<std::shared_ptr<const uint8_t>, uint64_t>>>
      taken;
  for (Field& f : fields) {
    if (f.tensor == nullptr || !f.tensor->has_slot()) continue;
    const petra::v1::SlotRef ref = f.tensor->slot();
    f.tensor->clear_slot();
    uint64_t link = 0;
    if (!IsBulkRing(ref.ring()) ||
        !absl::SimpleAtoi(
            absl::string_view(ref.ring()).substr(sizeof(kBulkRingPrefix) - 1),
            &link)) {
      fail(f, absl::StatusCode::kInvalidArgument,
           absl::StrCat("\"", ref.ring(), "\" names no bulk link"));
      continue;
    }
    auto key = std::pair{link, ref.sequence()};
    auto it = taken.find(key);
    absl::StatusOr<uint64_t> bytes =
        wire::ExpectedPayloadBytes(*f.tensor, limits, f.name);
    if (!f.tensor->data().empty() || f.tensor->has_chunk()) {
      fail(f, absl::StatusCode::kInvalidArgument,
           "has both bytes and a bulk reference");
    } else if (!bytes.ok()) {
      if (status.ok()) status = bytes.status();
    }
    if (!status.ok()) {
      // Still taken, so a refused micro-batch does not stay in the inbox.
      if (it == taken.end())
        taken.emplace(key, inbox_.Take(link, ref.sequence()));
      continue;
    }
    if (*bytes == 0) {
      f.bytes = std::make_shared<uint8_t>(0);
      continue;
    }
    if (it == taken.end()) {
      it = taken.emplace(key, inbox_.Take(link, ref.sequence())).first;
    }
    if (!it->second.ok()) {
      fail(f, it->second.status().code(), it->second.status().message());
      continue;
    }
    const auto& [buffer, total] = *it->second;
    if (ref.offset() > total || *bytes > total - ref.offset()) {
      fail(f, absl::StatusCode::kInvalidArgument,
           absl::StrCat(*bytes, " bytes at ", ref.offset(),
                        " lie outside the micro-batch's ", total, " bytes"));
      continue;
    }
    f.bytes = std::shared_ptr<const void>(buffer, buffer.get() + ref.offset());
    fetched_ += *bytes;
  }
  return status;
}

}  // namespace petra::link
