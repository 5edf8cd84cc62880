#include "services/wire/reply_queue.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "petra/v1/stage.pb.h"

namespace petra::wire {
namespace {

using petra::v1::StreamReply;

StreamReply Credit(int n) {
  StreamReply r;
  r.mutable_credit()->set_micro_batches(n);
  return r;
}
StreamReply Done(uint64_t id) {
  StreamReply r;
  r.mutable_done()->set_micro_batch_id(id);
  return r;
}

// A reactor's side that records what the queue asks of it; writes complete
// when the test says so, as gRPC's do later.
struct FakeStream {
  std::vector<StreamReply> started;  // each write as it started
  int in_flight = 0;
  int finishes = 0;
  std::optional<grpc::Status> finished;

  ReplyQueue<StreamReply>::Stream Make(bool reads) {
    return {[this](const StreamReply* r) {
              EXPECT_EQ(in_flight, 0)
                  << "a second write while one is in flight";
              ++in_flight;
              started.push_back(*r);
            },
            [this](const grpc::Status& s) {
              ++finishes;
              finished = s;
            },
            reads};
  }
};

bool JoinCredits(StreamReply& waiting, const StreamReply& incoming) {
  if (!waiting.has_credit() || !incoming.has_credit()) return false;
  waiting.mutable_credit()->set_micro_batches(
      waiting.credit().micro_batches() + incoming.credit().micro_batches());
  return true;
}

// Completes the write in flight, as gRPC's OnWriteDone would.
void Complete(FakeStream& f, ReplyQueue<StreamReply>& q, bool ok = true) {
  ASSERT_EQ(f.in_flight, 1);
  f.in_flight = 0;
  q.WriteDone(ok);
}

TEST(ReplyQueue, WritesOneAtATimeInOrderAndMergesOnlyWhatWaits) {
  FakeStream f;
  ReplyQueue<StreamReply> q(f.Make(/*reads=*/true), &JoinCredits);
  q.Push(Credit(1));  // written at once
  q.Push(Credit(2));  // waits
  q.Push(Credit(3));  // joins the waiting one, not the one in flight
  q.Push(Done(7));
  ASSERT_EQ(f.started.size(), 1u);
  Complete(f, q);
  Complete(f, q);
  Complete(f, q);
  ASSERT_EQ(f.started.size(), 3u);
  EXPECT_EQ(f.started[0].credit().micro_batches(), 1u);
  EXPECT_EQ(f.started[1].credit().micro_batches(), 5u);
  EXPECT_EQ(f.started[2].done().micro_batch_id(), 7u);
  EXPECT_EQ(f.finishes, 0) << "a stream that reads finishes only on Close";
}

TEST(ReplyQueue, TheLastMessageFinishesTheStreamOnceWritten) {
  FakeStream f;
  ReplyQueue<StreamReply> q(f.Make(/*reads=*/false));
  q.Push(Done(1));
  q.Push(Done(2), /*last=*/true);
  Complete(f, q);
  EXPECT_EQ(f.finishes, 0);
  Complete(f, q);
  ASSERT_EQ(f.finishes, 1);
  EXPECT_TRUE(f.finished->ok());
  q.Push(Done(3));
  EXPECT_EQ(f.started.size(), 2u) << "nothing is written after the finish";
}

TEST(ReplyQueue, CloseFinishesWithItsStatusAfterWhatIsQueued) {
  FakeStream f;
  ReplyQueue<StreamReply> q(f.Make(/*reads=*/true));
  q.Push(Done(1));
  q.Close(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "key"));
  EXPECT_EQ(f.finishes, 0) << "a write is in flight";
  // A reply produced meanwhile still goes out before the finish.
  q.Push(Done(2));
  Complete(f, q);
  EXPECT_EQ(f.finishes, 0);
  Complete(f, q);
  ASSERT_EQ(f.finishes, 1);
  EXPECT_EQ(f.finished->error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(f.started.size(), 2u);
  q.Close();  // a second Close (a late read's end) finishes nothing
  EXPECT_EQ(f.finishes, 1);
}

TEST(ReplyQueue, CloseWithNothingQueuedFinishesAtOnce) {
  FakeStream f;
  ReplyQueue<StreamReply> q(f.Make(/*reads=*/true));
  q.Close();
  ASSERT_EQ(f.finishes, 1);
  EXPECT_TRUE(f.finished->ok());
}

TEST(ReplyQueue, AWriteOnlyStreamFinishesWhenItsPeerGoes) {
  FakeStream idle;
  ReplyQueue<StreamReply> q(idle.Make(/*reads=*/false));
  q.Cancelled();
  ASSERT_EQ(idle.finishes, 1) << "no write in flight: at once";
  EXPECT_EQ(idle.finished->error_code(), grpc::StatusCode::CANCELLED);

  FakeStream busy;
  ReplyQueue<StreamReply> r(busy.Make(/*reads=*/false));
  r.Push(Done(1));
  r.Push(Done(2));
  r.Cancelled();
  EXPECT_EQ(busy.finishes, 0) << "the write in flight must complete first";
  Complete(busy, r, /*ok=*/false);
  ASSERT_EQ(busy.finishes, 1);
  EXPECT_EQ(busy.finished->error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(busy.started.size(), 1u) << "what waited is dropped";
}

TEST(ReplyQueue, AFailedWriteEndsAWriteOnlyStream) {
  FakeStream f;
  ReplyQueue<StreamReply> q(f.Make(/*reads=*/false));
  q.Push(Done(1));
  q.Push(Done(2));
  Complete(f, q, /*ok=*/false);
  ASSERT_EQ(f.finishes, 1);
  EXPECT_EQ(f.started.size(), 1u);
  q.Push(Done(3));
  EXPECT_EQ(f.started.size(), 1u);
}

TEST(ReplyQueue, AStreamThatReadsFinishesOnlyWhenItsReadsEnd) {
  FakeStream f;
  ReplyQueue<StreamReply> q(f.Make(/*reads=*/true));
  q.Push(Done(1));
  q.Cancelled();
  Complete(f, q, /*ok=*/false);
  EXPECT_EQ(f.finishes, 0) << "a read is pending: Finish would race it";
  q.Push(Done(2));
  EXPECT_EQ(f.started.size(), 1u) << "the peer is gone: dropped";
  q.Close();  // the pending read ended (ok = false)
  EXPECT_EQ(f.finishes, 1);
}

TEST(ReplyQueue, NothingReachesADetachedReactor) {
  FakeStream f;
  ReplyQueue<StreamReply> q(f.Make(/*reads=*/true));
  q.Detach();
  q.Push(Done(1));
  q.Close();
  q.Cancelled();
  EXPECT_TRUE(f.started.empty());
  EXPECT_EQ(f.finishes, 0);
}

}  // namespace
}  // namespace petra::wire
