// The data channels' conformance suite at the codec: every transport this
// machine has carries micro-batches through EncodeForward/EncodeBackward and
// the assemblers, in order, bit for bit, large and empty, reusing its slots,
// and stops cleanly when cancelled. Messages cross as serialized bytes, as
// on a stream. (The stream level is in
// tests/integration/bad_input_test.cc: credits, floods, a vanished peer.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <thread>

#include "services/engine/blocking_queue.h"
#include "services/link/bulk_service.h"
#include "services/link/channel_factory.h"
#include "services/link/ipc_device.h"
#include "services/link/shared_ring.h"
#include "services/link/shared_ring_channel.h"
#include "services/link/transport_choice.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/stage_messages.h"

namespace petra::link {
namespace {

using ::testing::HasSubstr;

// A server with the bulk channel's receiving end, on loopback (grpc_bulk
// needs one; the other transports reach nothing over the network).
class BulkServer {
 public:
  static BulkServer& Get() {
    static BulkServer* const server = new BulkServer();
    return *server;
  }
  BulkConnector connector() const {
    return [address = address_](int i) {
      return wire::CreateBulkChannel(address, wire::TransportSecurity(), i);
    };
  }

 private:
  BulkServer() {
    int port = 0;
    auto server = wire::StartServer("127.0.0.1:0", "--test", {&receiver_},
                                    &port, wire::TransportSecurity());
    if (!server.ok()) std::abort();
    server_ = std::move(*server);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  BulkReceiver receiver_{BulkReceiver::KeyIs("test-data-key")};
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

class DataChannel : public ::testing::TestWithParam<petra::v1::Transport> {
 protected:
  void SetUp() override {
    if (GetParam() == petra::v1::TRANSPORT_CUDA_IPC) {
      // cuda_ipc's protocol over the host stand-in of its runtime
      // (ipc_device.h), which the fetcher of any build reads: CUDA cannot
      // map a handle in the process that made it, so the CUDA runtime's
      // own crossing is GpuCudaIpc's, between two processes.
      placer_ = std::make_unique<SharedRingPlacer>(
          [] { return absl::OkStatus(); }, kRingSlots, false, 0,
          &HostIpcDevice());
    } else {
      auto placer = MakePlacer(
          GetParam(), [] { return absl::OkStatus(); },
          petra::v1::TRANSPORT_AUTO, BulkServer::Get().connector(),
          /*cuda_device=*/-1, "test-data-key");
      ASSERT_TRUE(placer.ok()) << placer.status();
      placer_ = std::move(*placer);
    }
    fetcher_ = MakeFetcher();
  }
  void TearDown() override {
    placer_.reset();
    fetcher_.reset();
    // Every micro-batch that crossed was taken: nothing waits in the inbox.
    EXPECT_EQ(BulkInbox::Global().held_micro_batches(), 0);
    // Nothing outlives the channel: no exported or mapped device memory,
    // no event, no receive buffer.
    const IpcCounts c = HostIpcDevice().counts();
    EXPECT_EQ(c.exported_regions + c.mapped_regions + c.events +
                  c.opened_events + c.local_buffers,
              0);
  }

  // One micro-batch there and back through serialized messages.
  absl::StatusOr<model::ForwardBatch> RoundTrip(const model::ForwardBatch& p) {
    auto parts = wire::EncodeForward(p, 1 << 20, placer_.get());
    if (!parts.ok()) return parts.status();
    wire::ForwardAssembler assembler({}, fetcher_.get());
    std::optional<model::ForwardBatch> out;
    for (const petra::v1::ForwardMessage& m : *parts) {
      petra::v1::ForwardMessage copy;
      if (!copy.ParseFromString(m.SerializeAsString())) {
        return absl::InternalError("does not parse");
      }
      auto got = assembler.Add(std::move(copy));
      if (!got.ok()) return got.status();
      if (got->has_value()) out = std::move(**got);
    }
    if (!out) return absl::InternalError("no micro-batch came out");
    return std::move(*out);
  }

  std::unique_ptr<wire::PayloadPlacer> placer_;
  std::unique_ptr<wire::PayloadFetcher> fetcher_;
};

model::ForwardBatch Forward(int64_t id, torch::Tensor a, torch::Tensor b,
                            torch::Tensor labels = {}) {
  model::ForwardBatch p;
  p.header.job_id = "job-1";
  p.header.micro_batch_id = static_cast<uint64_t>(id);
  p.x = {std::move(a), std::move(b)};
  p.labels = std::move(labels);
  return p;
}

TEST_P(DataChannel, CarriesEveryTensorOfAMicroBatchBitForBit) {
  torch::manual_seed(1);
  model::ForwardBatch p =
      Forward(3, torch::randn({4, 3, 5, 5}), torch::randn({4, 3, 5, 5}),
              torch::tensor({1, 0, 7, 2}, torch::kInt64));
  p.tangents.push_back(
      {torch::randn({4, 3, 5, 5}), torch::randn({4, 3, 5, 5})});
  auto out = RoundTrip(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->header.micro_batch_id, 3u);
  EXPECT_TRUE(torch::equal(out->x.a, p.x.a));
  EXPECT_TRUE(torch::equal(out->x.b, p.x.b));
  EXPECT_TRUE(torch::equal(out->labels, p.labels));
  ASSERT_EQ(out->tangents.size(), 1u);
  EXPECT_TRUE(torch::equal(out->tangents[0].b, p.tangents[0].b));

  model::BackwardBatch back;
  back.header.micro_batch_id = 3;
  back.output = {torch::randn({2, 8}), torch::randn({2, 8})};
  back.grad = {torch::randn({2, 8}), torch::randn({2, 8})};
  auto parts = wire::EncodeBackward(back, 1 << 20, placer_.get());
  ASSERT_TRUE(parts.ok()) << parts.status();
  wire::BackwardAssembler assembler({}, fetcher_.get());
  std::optional<model::BackwardBatch> got;
  for (petra::v1::BackwardMessage& m : *parts) {
    auto r = assembler.Add(std::move(m));
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->has_value()) got = std::move(**r);
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(torch::equal(got->output.a, back.output.a));
  EXPECT_TRUE(torch::equal(got->grad.b, back.grad.b));
}

// The micro-batch records where its tensors arrived: in the data channel's
// receive buffer, or (over plain gRPC) in memory decoded from the messages.
TEST_P(DataChannel, TheMicroBatchSaysWhereItsTensorsArrived) {
  model::ForwardBatch p = Forward(0, torch::randn({2, 3}), {});
  p.home = model::TensorHome::kDevice;  // the sender's: not carried
  auto out = RoundTrip(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->home, GetParam() == petra::v1::TRANSPORT_GRPC
                           ? model::TensorHome::kHost
                           : model::TensorHome::kSlot);
}

TEST_P(DataChannel, AMessageWithoutTensorsTakesNoSlot) {
  // Mode forward_gradient sends directional derivatives down, no tensors:
  // more of them than the ring has slots, none waits for one.
  for (int i = 0; i < 4 * kRingSlots; ++i) {
    model::BackwardBatch p;
    p.header.micro_batch_id = static_cast<uint64_t>(i);
    p.directional = {0.5, -1.0};
    auto parts = wire::EncodeBackward(p, 1 << 20, placer_.get());
    ASSERT_TRUE(parts.ok()) << parts.status();
    wire::BackwardAssembler assembler({}, fetcher_.get());
    auto got = assembler.Add(std::move(parts->front()));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->directional, p.directional);
  }
}

TEST_P(DataChannel, CarriesLargeAndEmptyTensors) {
  // 48 MiB in one micro-batch (chunked on gRPC, one slot on shm), then a
  // micro-batch of no samples, then a labels-only one.
  torch::Tensor big = torch::arange(12 << 20, torch::kFloat32);
  auto large = RoundTrip(Forward(0, big, {}));
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_TRUE(torch::equal(large->x.a, big));
  auto empty =
      RoundTrip(Forward(1, torch::empty({0, 3}), torch::empty({0, 3})));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->x.a.sizes(), (std::vector<int64_t>{0, 3}));
  auto labels =
      RoundTrip(Forward(2, {}, {}, torch::tensor({5, 6}, torch::kInt64)));
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_FALSE(labels->x.a.defined());
  EXPECT_TRUE(torch::equal(labels->labels, torch::tensor({5, 6})));
}

TEST_P(DataChannel, KeepsTheOrderWhileASenderRunsAheadAndReusesItsSlots) {
  // 40 micro-batches through a ring of 3 slots: the sender waits for slots
  // the receiver frees, the receiver gets each once, in order, intact.
  constexpr int kCount = 40;
  engine::BlockingQueue<std::string> wire_queue(8);
  std::atomic<bool> failed{false};
  std::thread sender([&] {
    for (int i = 0; i < kCount; ++i) {
      auto parts = wire::EncodeForward(
          Forward(i, torch::full({64, 64}, static_cast<float>(i)), {}), 1 << 20,
          placer_.get());
      if (!parts.ok()) {
        failed = true;
        break;
      }
      for (const auto& m : *parts) wire_queue.Push(m.SerializeAsString());
    }
    wire_queue.Close();
  });
  wire::ForwardAssembler assembler({}, fetcher_.get());
  int next = 0;
  while (std::optional<std::string> bytes = wire_queue.Pop()) {
    petra::v1::ForwardMessage m;
    ASSERT_TRUE(m.ParseFromString(*bytes));
    auto got = assembler.Add(std::move(m));
    ASSERT_TRUE(got.ok()) << got.status();
    if (!got->has_value()) continue;
    EXPECT_EQ((*got)->header.micro_batch_id, static_cast<uint64_t>(next));
    EXPECT_TRUE(torch::equal((*got)->x.a,
                             torch::full({64, 64}, static_cast<float>(next))));
    ++next;
  }
  sender.join();
  EXPECT_FALSE(failed);
  EXPECT_EQ(next, kCount);
}

TEST_P(DataChannel, ARefusedMicroBatchLeavesTheChannelUsable) {
  // A message the assembler refuses (labels of the wrong type) still frees
  // its slot, and the next micro-batch crosses.
  for (int i = 0; i < 2 * kRingSlots; ++i) {
    auto bad = RoundTrip(
        Forward(i, torch::randn({2, 3}), {}, torch::tensor({1.5f, 2.5f})));
    EXPECT_THAT(bad.status().message(), HasSubstr("labels must be int64"));
  }
  auto good = RoundTrip(Forward(9, torch::randn({2, 3}), {}));
  EXPECT_TRUE(good.ok()) << good.status();
}

INSTANTIATE_TEST_SUITE_P(
    EveryTransport, DataChannel,
    ::testing::Values(petra::v1::TRANSPORT_GRPC, petra::v1::TRANSPORT_SHM,
                      petra::v1::TRANSPORT_GRPC_BULK,
                      petra::v1::TRANSPORT_CUDA_IPC),
    [](const ::testing::TestParamInfo<petra::v1::Transport>& info) {
      return TransportName(info.param);
    });

// What only a channel beside the stream can get wrong.
TEST(SharedMemoryChannel, ACancelEndsAWaitForAFullRing) {
  SharedRingPlacer placer({}, /*slots=*/1);
  const float x = 1;
  ASSERT_TRUE(placer.Place({{&x, sizeof(x)}}).ok());  // nobody reads it
  std::thread cancel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    placer.Cancel();
  });
  auto second = placer.Place({{&x, sizeof(x)}});
  cancel.join();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(placer.Place({{&x, sizeof(x)}}).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(SharedMemoryChannel, AReplayedOrForgedReferenceIsRefused) {
  SharedRingPlacer placer;
  SharedRingFetcher fetcher;
  model::ForwardBatch p = Forward(0, torch::randn({2, 3}), {});
  auto parts = wire::EncodeForward(p, 1 << 20, &placer);
  ASSERT_TRUE(parts.ok());
  const std::string bytes = parts->front().SerializeAsString();
  for (int round = 0; round < 2; ++round) {
    petra::v1::ForwardMessage m;
    ASSERT_TRUE(m.ParseFromString(bytes));
    wire::ForwardAssembler assembler({}, &fetcher);
    auto got = assembler.Add(std::move(m));
    if (round == 0) {
      EXPECT_TRUE(got.ok()) << got.status();
    } else {
      EXPECT_THAT(got.status().message(),
                  HasSubstr("activation.first: slot 0 of ring"));
      EXPECT_THAT(got.status().message(), HasSubstr("stale or repeated"));
    }
  }
  // A shape larger than the slot, and a ring that is not there.
  parts = wire::EncodeForward(p, 1 << 20, &placer);
  ASSERT_TRUE(parts.ok());
  petra::v1::ForwardMessage big = parts->front();
  big.mutable_activation()->mutable_first()->set_shape(0, 1 << 20);
  wire::ForwardAssembler a1({}, &fetcher);
  EXPECT_THAT(a1.Add(std::move(big)).status().message(), HasSubstr("overrun"));
  petra::v1::ForwardMessage gone = parts->front();
  gone.mutable_activation()->mutable_first()->mutable_slot()->set_ring(
      "/petra-0-1-424242");
  wire::ForwardAssembler a2({}, &fetcher);
  auto missing = a2.Add(std::move(gone));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("use transport grpc"));
}

TEST(SharedMemoryChannel, ReceiveBuffersAreReusedOnceTheirTensorsAreFreed) {
  // A large micro-batch's memory is not faulted in afresh each time: the
  // buffer of a freed tensor carries the next one.
  SharedRingPlacer placer;
  SharedRingFetcher fetcher;
  auto once = [&](float value) {
    auto parts = wire::EncodeForward(
        Forward(0, torch::full({1 << 20}, value), {}), 1 << 20, &placer);
    EXPECT_TRUE(parts.ok());
    wire::ForwardAssembler assembler({}, &fetcher);
    auto got = assembler.Add(std::move(parts->front()));
    EXPECT_TRUE(got.ok() && got->has_value()) << got.status();
    return (*got)->x.a;
  };
  torch::Tensor first = once(1);
  const void* memory = first.data_ptr();
  EXPECT_TRUE(torch::equal(first, torch::full({1 << 20}, 1.0f)));
  torch::Tensor second = once(2);  // the first is still in use
  EXPECT_NE(second.data_ptr(), memory);
  first = torch::Tensor();
  torch::Tensor third = once(3);
  EXPECT_EQ(third.data_ptr(), memory);
  EXPECT_TRUE(torch::equal(third, torch::full({1 << 20}, 3.0f)));
  EXPECT_TRUE(torch::equal(second, torch::full({1 << 20}, 2.0f)));
}

TEST(SharedMemoryChannel, NoRoomFallsBackToTheMessageOnlyWhereTheJobAllows) {
  // A /dev/shm too small for a micro-batch (here: a 1 MiB cap per ring).
  // Under transport auto the bytes travel in the message, and the next
  // small micro-batch uses the channel again; under transport shm, asked
  // for by name, the send fails saying why.
  const torch::Tensor big = torch::randn({1 << 20});  // 4 MiB
  const torch::Tensor small = torch::randn({16});
  SharedRingFetcher fetcher;
  {
    SharedRingPlacer placer({}, kRingSlots, /*may_fall_back=*/true, 1 << 20);
    auto parts = wire::EncodeForward(Forward(0, big, {}), 1 << 20, &placer);
    ASSERT_TRUE(parts.ok()) << parts.status();
    EXPECT_FALSE(wire::CarriesSlots(*parts));
    EXPECT_EQ(parts->size(), 4u);  // 4 chunks of 1 MiB
    wire::ForwardAssembler assembler({}, &fetcher);
    std::optional<model::ForwardBatch> got;
    for (auto& m : *parts) {
      auto r = assembler.Add(std::move(m));
      ASSERT_TRUE(r.ok()) << r.status();
      if (r->has_value()) got = std::move(**r);
    }
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(torch::equal(got->x.a, big));
    parts = wire::EncodeForward(Forward(1, small, {}), 1 << 20, &placer);
    ASSERT_TRUE(parts.ok());
    EXPECT_TRUE(wire::CarriesSlots(*parts));
    EXPECT_TRUE(assembler.Add(std::move(parts->front())).ok());
  }
  SharedRingPlacer forced({}, kRingSlots, /*may_fall_back=*/false, 1 << 20);
  auto parts = wire::EncodeForward(Forward(0, big, {}), 1 << 20, &forced);
  EXPECT_EQ(parts.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(parts.status().message(), HasSubstr("exceeds the cap"));
}

TEST(SharedMemoryChannel, AReceiverWithoutAFetcherRefusesSlotsClearly) {
  SharedRingPlacer placer;
  auto parts = wire::EncodeForward(Forward(0, torch::randn({2, 3}), {}),
                                   1 << 20, &placer);
  ASSERT_TRUE(parts.ok());
  wire::ForwardAssembler plain;
  EXPECT_THAT(plain.Add(parts->front()).status().message(),
              HasSubstr("names a data-channel slot, which this receiver does "
                        "not read"));
}

TEST(SharedMemoryChannel,
     ARingIsRemadeWhenAMicroBatchOutgrowsItAndNothingLeaks) {
  {
    SharedRingPlacer placer;
    SharedRingFetcher fetcher;
    for (int64_t n : {16, 4096, 8, 65536}) {
      auto parts = wire::EncodeForward(Forward(n, torch::randn({n}), {}),
                                       1 << 20, &placer);
      ASSERT_TRUE(parts.ok());
      wire::ForwardAssembler assembler({}, &fetcher);
      auto got = assembler.Add(std::move(parts->front()));
      ASSERT_TRUE(got.ok()) << got.status();
    }
    EXPECT_EQ(fetcher.rings(), 3);           // 16, 4096 and 65536 elements
    EXPECT_LE(placer.rings(), 2);            // outgrown idle rings are let go
    EXPECT_EQ(CountRingNames(getpid()), 0);  // the receiver unlinked them
  }
  EXPECT_EQ(CountRingMappings(getpid()), 0);
}

}  // namespace
}  // namespace petra::link
