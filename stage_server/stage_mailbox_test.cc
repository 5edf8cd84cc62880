// The mailbox's pass boundaries, without gRPC: what is accepted between
// BeginPass and EndPass, and what a late EndPass may not close.
#include "stage_server/stage_mailbox.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace petra::stage_server {
namespace {

using ::testing::HasSubstr;

class Replies : public ReplySink {
 public:
  void Send(petra::v1::StreamReply r) override {
    if (r.has_credit()) credits.push_back(r.credit().micro_batches());
  }
  std::vector<uint32_t> credits;  // each credit reply's grant
};

model::ForwardBatch Data(uint64_t id) {
  model::ForwardBatch p;
  p.header.job_id = "job-1";
  p.header.micro_batch_id = id;
  p.header.sender_stage = -1;
  p.x = {torch::zeros({2, 1, 4, 4}), {}};
  return p;
}

TEST(StageMailbox, EndPassRefusesLateMessagesOfItsOwnPassOnly) {
  StageMailbox box(0, 2, 4);
  auto from = std::make_shared<Replies>();
  absl::Status s = box.Deliver(Data(0), from);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not running a pass"));

  const uint64_t first = box.BeginPass({petra::v1::PHASE_TRAIN, 1, 3});
  ASSERT_TRUE(box.Deliver(Data(0), from).ok());
  ASSERT_TRUE(box.Deliver(Data(1), from).ok());
  absl::StatusOr<model::ForwardBatch> item = box.NextForward(0);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->id(), 0);
  box.EndPass(first);
  s = box.Deliver(Data(2), from);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not running a pass"));

  // The next pass starts clean: micro-batch 1 of the ended pass is gone.
  const uint64_t second = box.BeginPass({petra::v1::PHASE_TRAIN, 2, 3});
  EXPECT_NE(second, first);
  ASSERT_TRUE(box.Deliver(Data(0), from).ok());
  item = box.NextForward(0);
  ASSERT_TRUE(item.ok());
  // The first pass's stage finishing late must not end the second.
  box.EndPass(first);
  EXPECT_TRUE(box.Deliver(Data(1), from).ok());
  box.EndPass(second);
  EXPECT_FALSE(box.Deliver(Data(2), from).ok());
}

// Credits gathered c at a time: one reply per c micro-batches taken, the
// pass's last micro-batch sends what is owed, and the end of a pass sends
// the rest (a stream living on keeps its whole window).
TEST(StageMailbox, CreditsGoOutInBatchesAndNoneIsLost) {
  StageMailbox box(0, 2, /*window=*/8, {}, /*credit_batch=*/3);
  auto from = std::make_shared<Replies>();
  box.BeginPass({petra::v1::PHASE_TRAIN, 1, 7});
  for (uint64_t id = 0; id < 7; ++id) {
    ASSERT_TRUE(box.Deliver(Data(id), from).ok()) << id;
    ASSERT_TRUE(box.NextForward(static_cast<int64_t>(id)).ok()) << id;
  }
  // 3 + 3, then the last micro-batch's 1.
  EXPECT_EQ(from->credits, (std::vector<uint32_t>{3, 3, 1}));

  from->credits.clear();
  const uint64_t pass = box.BeginPass({petra::v1::PHASE_TRAIN, 2, 7});
  for (uint64_t id = 0; id < 2; ++id) {
    ASSERT_TRUE(box.Deliver(Data(id), from).ok());
    ASSERT_TRUE(box.NextForward(static_cast<int64_t>(id)).ok());
  }
  EXPECT_TRUE(from->credits.empty());
  box.EndPass(pass);
  EXPECT_EQ(from->credits, (std::vector<uint32_t>{2}));

  // A batch over half the window is cut to half: the sender always keeps
  // credits for the micro-batch the stage takes next.
  StageMailbox narrow(0, 2, /*window=*/4, {}, /*credit_batch=*/8);
  auto other = std::make_shared<Replies>();
  narrow.BeginPass({petra::v1::PHASE_TRAIN, 1, 9});
  for (uint64_t id = 0; id < 4; ++id) {
    ASSERT_TRUE(narrow.Deliver(Data(id), other).ok());
    ASSERT_TRUE(narrow.NextForward(static_cast<int64_t>(id)).ok());
  }
  EXPECT_EQ(other->credits, (std::vector<uint32_t>{2, 2}));
}

// Mode forward_gradient: labels and tangents come up with the activation
// to every stage but the last, and derivatives come down; other modes
// refuse both.
TEST(StageMailbox, ForwardGradientCarriesLabelsTangentsAndDerivatives) {
  auto from = std::make_shared<Replies>();
  model::ForwardBatch up = Data(0);
  up.header.sender_stage = 0;
  up.labels = torch::zeros({2}, torch::kInt64);
  up.tangents = {{torch::ones({2, 1, 4, 4}), {}}};
  model::BackwardBatch down;
  down.header.job_id = "job-1";
  down.header.sender_stage = 2;
  down.directional = {0.5, -1.5};

  petra::v1::TrainingSpec mode;
  mode.set_mode(petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
  StageMailbox fg(1, 3, 4, schedule::PlanMode(mode).traffic);
  fg.BeginPass({petra::v1::PHASE_TRAIN, 1, 2});
  ASSERT_TRUE(fg.Deliver(up, from).ok());
  absl::StatusOr<model::ForwardBatch> item = fg.NextForward(0);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_TRUE(item->labels.defined());
  ASSERT_EQ(item->tangents.size(), 1u);
  EXPECT_TRUE(torch::equal(item->tangents[0].a, torch::ones({2, 1, 4, 4})));
  ASSERT_TRUE(fg.Deliver(down, from).ok());
  absl::StatusOr<model::BackwardBatch> back = fg.NextBackward(0);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->directional, (std::vector<double>{0.5, -1.5}));
  // A backward with tensors instead is refused.
  model::BackwardBatch tensors;
  tensors.header = down.header;
  tensors.header.micro_batch_id = 1;
  tensors.output = tensors.grad = {torch::zeros({2, 1, 4, 4}), {}};
  absl::Status s = fg.Deliver(tensors, from);
  EXPECT_THAT(std::string(s.message()), HasSubstr("directional derivatives"));

  StageMailbox petra(1, 3, 4);
  petra.BeginPass({petra::v1::PHASE_TRAIN, 1, 2});
  s = petra.Deliver(up, from);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  up.labels = torch::Tensor();
  s = petra.Deliver(up, from);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not forward_gradient"));
  s = petra.Deliver(down, from);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not forward_gradient"));
}

}  // namespace
}  // namespace petra::stage_server
