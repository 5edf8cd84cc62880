// The mailbox's pass boundaries, without gRPC: what is accepted between
// BeginPass and EndPass, and what a late EndPass may not close.
#include "stage_server/stage_mailbox.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::stage_server {
namespace {

using ::testing::HasSubstr;

class Replies : public ReplySink {
 public:
  void Send(petra::v1::StreamReply) override {}
};

wire::ForwardPayload Data(uint64_t id) {
  wire::ForwardPayload p;
  p.header.job_id = "job-1";
  p.header.micro_batch_id = id;
  p.header.sender_stage = -1;
  p.x = {torch::zeros({2, 1, 4, 4}), {}};
  return p;
}

TEST(StageMailbox, EndPassRefusesLateMessagesOfItsOwnPassOnly) {
  StageMailbox box(0, 2, 4);
  auto from = std::make_shared<Replies>();
  absl::Status s = box.DeliverForward(Data(0), from);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not running a pass"));

  const uint64_t first = box.BeginPass({petra::v1::PHASE_TRAIN, 1, 3});
  ASSERT_TRUE(box.DeliverForward(Data(0), from).ok());
  ASSERT_TRUE(box.DeliverForward(Data(1), from).ok());
  absl::StatusOr<engine::ForwardItem> item = box.NextForward(0);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->id, 0);
  box.EndPass(first);
  s = box.DeliverForward(Data(2), from);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not running a pass"));

  // The next pass starts clean: micro-batch 1 of the ended pass is gone.
  const uint64_t second = box.BeginPass({petra::v1::PHASE_TRAIN, 2, 3});
  EXPECT_NE(second, first);
  ASSERT_TRUE(box.DeliverForward(Data(0), from).ok());
  item = box.NextForward(0);
  ASSERT_TRUE(item.ok());
  // The first pass's stage finishing late must not end the second.
  box.EndPass(first);
  EXPECT_TRUE(box.DeliverForward(Data(1), from).ok());
  box.EndPass(second);
  EXPECT_FALSE(box.DeliverForward(Data(2), from).ok());
}

}  // namespace
}  // namespace petra::stage_server
