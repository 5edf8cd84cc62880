#include "services/wire/stage_messages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace petra::wire {
namespace {

using ::testing::HasSubstr;

MicroBatchHeader Header(uint64_t id) {
  MicroBatchHeader h;
  h.job_id = "job-1";
  h.micro_batch_id = id;
  h.step = 3;
  h.phase = petra::v1::PHASE_TRAIN;
  h.sender_stage = 2;
  h.epoch = 1;
  return h;
}

ForwardBatch Forward(uint64_t id, int64_t batch = 4) {
  torch::manual_seed(id);
  ForwardBatch p;
  p.header = Header(id);
  p.x = {torch::randn({batch, 8, 6, 6}), torch::randn({batch, 8, 6, 6})};
  p.labels = torch::randint(10, {batch}, torch::kInt64);
  return p;
}

std::optional<ForwardBatch> Feed(
    ForwardAssembler& a, const std::vector<petra::v1::ForwardMessage>& parts) {
  std::optional<ForwardBatch> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StatusOr<std::optional<ForwardBatch>> r = a.Add(parts[i]);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return std::nullopt;
    EXPECT_EQ(r->has_value(), i + 1 == parts.size()) << "part " << i;
    if (r->has_value()) out = std::move(**r);
  }
  return out;
}

TEST(StageMessages, ForwardRoundTripInOneMessage) {
  ForwardBatch p = Forward(7);
  auto parts = EncodeForward(p, 1 << 20);
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), 1u);
  EXPECT_TRUE(parts->front().last_part());
  ForwardAssembler a;
  std::optional<ForwardBatch> back = Feed(a, *parts);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->header.micro_batch_id, 7u);
  EXPECT_EQ(back->header.job_id, "job-1");
  EXPECT_EQ(back->header.sender_stage, 2);
  EXPECT_TRUE(torch::equal(back->x.a, p.x.a));
  EXPECT_TRUE(torch::equal(back->x.b, p.x.b));
  EXPECT_TRUE(torch::equal(back->labels, p.labels));
}

TEST(StageMessages, LargeTensorsAreChunkedWithinTheBudget) {
  ForwardBatch p = Forward(1, 64);  // 2 x 73,728 bytes of activations
  const uint64_t budget = 20000;
  auto parts = EncodeForward(p, budget);
  ASSERT_TRUE(parts.ok());
  EXPECT_GT(parts->size(), 7u);
  for (const auto& m : *parts) {
    EXPECT_LE(m.activation().first().data().size() +
                  m.activation().second().data().size() +
                  m.labels().data().size(),
              budget);
  }
  ForwardAssembler a;
  std::optional<ForwardBatch> back = Feed(a, *parts);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(torch::equal(back->x.a, p.x.a));
  EXPECT_TRUE(torch::equal(back->x.b, p.x.b));
  EXPECT_TRUE(torch::equal(back->labels, p.labels));
  // The stream goes on with the next micro-batch.
  ForwardBatch q = Forward(2, 64);
  std::optional<ForwardBatch> next = Feed(a, *EncodeForward(q, budget));
  ASSERT_TRUE(next.has_value());
  EXPECT_TRUE(torch::equal(next->x.a, q.x.a));
}

TEST(StageMessages, SingleTensorAndLabelsOnly) {
  ForwardBatch p;
  p.header = Header(3);
  p.x = {torch::ones({2, 3}), {}};
  ForwardAssembler a;
  auto back = Feed(a, *EncodeForward(p, 1 << 20));
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->x.b.defined());
  EXPECT_FALSE(back->labels.defined());

  ForwardBatch labels_only;
  labels_only.header = Header(4);
  labels_only.labels = torch::zeros({5}, torch::kInt64);
  back = Feed(a, *EncodeForward(labels_only, 1 << 20));
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->x.a.defined());
  EXPECT_EQ(back->labels.size(0), 5);
}

TEST(StageMessages, BackwardRoundTrip) {
  BackwardBatch p;
  p.header = Header(9);
  p.output = {torch::randn({4, 2, 3, 3}), torch::randn({4, 2, 3, 3})};
  p.grad = {torch::randn({4, 2, 3, 3}), torch::randn({4, 2, 3, 3})};
  auto parts = EncodeBackward(p, 100);  // 288-byte tensors: 3 chunks each
  ASSERT_TRUE(parts.ok());
  EXPECT_GT(parts->size(), 4u);
  BackwardAssembler a;
  std::optional<BackwardBatch> back;
  for (const auto& m : *parts) {
    auto r = a.Add(m);
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->has_value()) back = std::move(**r);
  }
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(torch::equal(back->output.b, p.output.b));
  EXPECT_TRUE(torch::equal(back->grad.a, p.grad.a));
  EXPECT_EQ(back->header.step, 3u);
}

// Mode forward_gradient: tangents chunked like the activation, each back
// at its index; derivatives instead of tensors going down.
TEST(StageMessages, TangentsAndDirectionalDerivativesRoundTrip) {
  ForwardBatch p = Forward(5);
  for (int k = 0; k < 3; ++k) {
    p.tangents.push_back(
        {torch::randn({4, 8, 6, 6}), torch::randn({4, 8, 6, 6})});
  }
  auto parts = EncodeForward(p, 1000);  // 4.6 KB tensors: 5 chunks each
  ASSERT_TRUE(parts.ok());
  EXPECT_GT(parts->size(), 5u);
  ForwardAssembler a;
  std::optional<ForwardBatch> back = Feed(a, *parts);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->tangents.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(torch::equal(back->tangents[k].a, p.tangents[k].a)) << k;
    EXPECT_TRUE(torch::equal(back->tangents[k].b, p.tangents[k].b)) << k;
  }
  // A tangent not shaped like the activation is refused, naming it.
  p.tangents[1].a = torch::randn({4, 8, 6, 5});
  parts = EncodeForward(p, 1 << 20);
  ASSERT_TRUE(parts.ok());
  auto bad = a.Add(parts->front());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tangents[1]"));

  BackwardBatch d;
  d.header = Header(9);
  d.directional = {0.25, -3.0, 1e-9};
  auto down = EncodeBackward(d, 100);
  ASSERT_TRUE(down.ok());
  ASSERT_EQ(down->size(), 1u);
  BackwardAssembler b;
  auto r = b.Add(down->front());
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->directional, d.directional);
  EXPECT_FALSE((*r)->output.a.defined());
  // A sampled micro-batch's true gradient may come along (diagnostic)...
  d.grad = {torch::randn({4, 2}), {}};
  down = EncodeBackward(d, 1 << 20);
  ASSERT_TRUE(down.ok());
  r = b.Add(down->front());
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_TRUE(torch::equal((*r)->grad.a, d.grad.a));
  // ...an activation never.
  d.output = {torch::randn({4, 2}), {}};
  down = EncodeBackward(d, 1 << 20);
  ASSERT_TRUE(down.ok());
  r = b.Add(down->front());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not both"));
}

TEST(StageMessages, InterleavedMicroBatchIsRefusedAndTheStreamRecovers) {
  auto first = *EncodeForward(Forward(1, 64), 20000);
  auto second = *EncodeForward(Forward(2, 64), 20000);
  ForwardAssembler a;
  ASSERT_TRUE(a.Add(first[0]).ok());
  absl::StatusOr<std::optional<ForwardBatch>> r = a.Add(second[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(
      std::string(r.status().message()),
      HasSubstr(
          "micro-batch 2: arrived before the last part of micro-batch 1"));
  // The partial micro-batch 1 was dropped; micro-batch 2 from its start works.
  std::optional<ForwardBatch> back = Feed(a, second);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->header.micro_batch_id, 2u);
}

TEST(StageMessages, MalformedPartsNameTheMicroBatchAndField) {
  auto parts = *EncodeForward(Forward(5), 1 << 20);
  petra::v1::ForwardMessage bad = parts[0];
  bad.mutable_activation()->mutable_second()->mutable_data()->resize(10);
  ForwardAssembler a;
  auto r = a.Add(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("micro-batch 5: activation.second.data"));

  bad = parts[0];
  bad.mutable_labels()->set_dtype(petra::v1::DTYPE_FLOAT32);
  bad.mutable_labels()->mutable_data()->resize(16);
  r = a.Add(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("labels must be int64"));

  // Last part arrives while a chunked tensor is still incomplete.
  auto chunked = *EncodeForward(Forward(6, 64), 20000);
  petra::v1::ForwardMessage early = chunked[0];
  early.set_last_part(true);
  r = a.Add(early);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("incomplete at the last part"));

  // Huge declared shapes are refused before allocation.
  bad = parts[0];
  bad.mutable_activation()->mutable_first()->set_shape(0, int64_t{1} << 40);
  r = a.Add(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("over the limit"));
}

// A 0-d activation beside labels made torch throw from size(0) inside the
// stream reaction, ending the stage server.
TEST(StageMessages, BoundaryTensorsNeedAFloatingMicroBatchDimension) {
  ForwardBatch p = Forward(3);
  p.x = {torch::ones({}), {}};
  p.labels = torch::zeros({1}, torch::kInt64);
  ForwardAssembler a;
  absl::StatusOr<std::optional<ForwardBatch>> r;
  EXPECT_NO_THROW(r = a.Add((*EncodeForward(p, 1 << 20))[0]));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("micro-batch 3: activation.first needs a first "
                        "(micro-batch) dimension"));

  p.x = {torch::ones({4, 2}, torch::kInt32), {}};
  r = a.Add((*EncodeForward(p, 1 << 20))[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("activation.first must be floating point"));
  // Token ids pass alone (a language model's input, with a label per
  // token), not in a pair.
  p.x = {torch::ones({4, 2}, torch::kInt64), {}};
  p.labels = torch::zeros({4, 2}, torch::kInt64);
  r = a.Add((*EncodeForward(p, 1 << 20))[0]);
  EXPECT_TRUE(r.ok()) << r.status();
  p.x = {torch::ones({4, 2}, torch::kInt64), torch::ones({4, 2})};
  r = a.Add((*EncodeForward(p, 1 << 20))[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("activation.first must be floating point"));

  p = Forward(4);
  p.x.b = torch::ones({5, 8, 6, 6});
  r = a.Add((*EncodeForward(p, 1 << 20))[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("activation.first and activation.second hold 4 and 5"));

  // Found by tests/fuzz: a last part without any tensor made an empty
  // micro-batch (the mailbox refused it, but later and less clearly).
  petra::v1::ForwardMessage empty;
  empty.set_micro_batch_id(8);
  empty.set_last_part(true);
  r = a.Add(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("micro-batch 8: a forward message needs "
                        "activation.first or labels"));

  BackwardBatch back;
  back.header = Header(6);
  back.output = {torch::ones({}), {}};
  back.grad = {torch::ones({}), {}};
  BackwardAssembler b;
  absl::StatusOr<std::optional<BackwardBatch>> rb;
  EXPECT_NO_THROW(rb = b.Add((*EncodeBackward(back, 1 << 20))[0]));
  ASSERT_FALSE(rb.ok());
  EXPECT_THAT(std::string(rb.status().message()),
              HasSubstr("activation.first needs a first"));
  // The assemblers go on with the next good micro-batch.
  std::optional<ForwardBatch> good =
      Feed(a, *EncodeForward(Forward(7), 1 << 20));
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->header.micro_batch_id, 7u);
}

TEST(StageMessages, BackwardGradientMustMatchItsActivation) {
  BackwardBatch p;
  p.header = Header(1);
  p.output = {torch::ones({2, 3}), {}};
  p.grad = {torch::ones({2, 4}), {}};
  BackwardAssembler a;
  auto r = a.Add((*EncodeBackward(p, 1 << 20))[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(
      std::string(r.status().message()),
      HasSubstr("gradient.first does not match the shape of activation.first"));
  p.grad = {};
  r = a.Add((*EncodeBackward(p, 1 << 20))[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("needs activation.first and gradient.first"));
}

}  // namespace
}  // namespace petra::wire
