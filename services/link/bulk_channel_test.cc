// What only the bulk gRPC channel can get wrong: a receiver that is gone or
// never answers, a receiver without the service, frames that lie, and what
// the inbox keeps when a link ends. (The codec-level conformance suite,
// every transport alike, is data_channel_test.cc.)
#include "services/link/bulk_channel.h"

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/link/bulk_frame.h"
#include "services/link/bulk_service.h"
#include "services/wire/data_key.h"
#include "services/wire/grpc_defaults.h"

namespace petra::link {
namespace {

constexpr char kKey[] = "the-link-data-key";

using ::testing::HasSubstr;

// A server on loopback with the given services.
struct Server {
  explicit Server(std::vector<grpc::Service*> services) {
    int port = 0;
    auto s = wire::StartServer("127.0.0.1:0", "--test", services, &port,
                               wire::TransportSecurity());
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) server = std::move(*s);
    address = absl::StrCat("127.0.0.1:", port);
  }
  BulkConnector connector() const {
    return [a = address](int i) {
      return wire::CreateBulkChannel(a, wire::TransportSecurity(), i);
    };
  }
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

// Reads every frame and never acknowledges one.
class SilentReceiver final
    : public petra::v1::BulkService::WithRawCallbackMethod_Push<
          petra::v1::BulkService::Service> {
 public:
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Push(
      grpc::CallbackServerContext*) override {
    class Reactor final
        : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
     public:
      Reactor() { StartRead(&in_); }
      void OnReadDone(bool ok) override {
        if (ok) {
          in_.Clear();
          StartRead(&in_);
        } else {
          Finish(grpc::Status::OK);
        }
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer in_;
    };
    return new Reactor();
  }
};

TEST(BulkChannel, ASilentReceiverIsLeftOnCancelAndTheMemoryIsOursAgain) {
  SilentReceiver silent;
  Server server({&silent});
  GrpcBulkPlacer placer(server.connector(), {}, kKey, /*connections=*/2,
                        /*frame_bytes=*/1 << 16);
  std::vector<float> data(1 << 18, 1.5f);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    placer.Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  auto placed = placer.Place({{data.data(), data.size() * sizeof(float)}});
  canceller.join();
  // Place returned only once gRPC let go of `data` (the frames' slices).
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // And the channel stays failed.
  EXPECT_EQ(placer.Place({{data.data(), 4}}).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(BulkChannel, AStreamHealthThatFailsEndsTheWait) {
  SilentReceiver silent;
  Server server({&silent});
  std::atomic<int> asked{0};
  GrpcBulkPlacer placer(
      server.connector(),
      [&]() -> absl::Status {
        if (++asked < 3) return absl::OkStatus();
        return absl::UnavailableError("the Forward stream broke");
      },
      kKey);
  const float x = 1;
  auto placed = placer.Place({{&x, sizeof(x)}});
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(placed.status().message(), HasSubstr("Forward stream broke"));
}

TEST(BulkChannel, AReceiverThatIsGoneOrLacksTheServiceIsNamed) {
  BulkReceiver receiver(BulkReceiver::KeyIs(kKey));
  auto server =
      std::make_unique<Server>(std::vector<grpc::Service*>{&receiver});
  const std::string address = server->address;
  {
    GrpcBulkPlacer placer(server->connector(), {}, kKey);
    const float x = 2;
    ASSERT_TRUE(placer.Place({{&x, sizeof(x)}}).ok());
    // The receiver goes away: the next micro-batch fails, it does not hang.
    server->server->Shutdown(std::chrono::system_clock::now());
    auto placed = placer.Place({{&x, sizeof(x)}});
    EXPECT_EQ(placed.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(placed.status().message(),
                HasSubstr("a bulk stream to the receiver ended"));
  }
  server.reset();
  // A server with no BulkService (an older stage server).
  Server plain(std::vector<grpc::Service*>{});
  GrpcBulkPlacer placer(plain.connector(), {}, kKey);
  const float x = 3;
  auto placed = placer.Place({{&x, sizeof(x)}});
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(placed.status().message(),
              HasSubstr("does not serve petra.v1.BulkService"));
}

void Keep(void*) {}  // the test's frames are on its stack

// One frame on a Push stream of its own, presenting `key`; the stream's
// final status.
grpc::Status SendOneFrame(const std::string& address, const std::string& key,
                          grpc::ByteBuffer frame) {
  grpc::GenericStub stub(
      wire::CreateBulkChannel(address, wire::TransportSecurity(), 0));
  class Call final
      : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    Call(grpc::GenericStub& stub, const std::string& key,
         grpc::ByteBuffer frame)
        : frame_(std::move(frame)) {
      wire::PresentDataKey(&context_, key);
      stub.PrepareBidiStreamingCall(&context_, "/petra.v1.BulkService/Push",
                                    grpc::StubOptions(), this);
      StartRead(&in_);
      StartWriteLast(&frame_, grpc::WriteOptions());
      StartCall();
    }
    void OnReadDone(bool ok) override {
      if (ok) StartRead(&in_);
    }
    void OnDone(const grpc::Status& s) override { done_.set_value(s); }
    grpc::Status Wait() { return done_.get_future().get(); }

   private:
    grpc::ClientContext context_;
    grpc::ByteBuffer frame_, in_;
    std::promise<grpc::Status> done_;
  };
  Call call(stub, key, std::move(frame));
  return call.Wait();
}

TEST(BulkChannel, FramesThatLieEndTheirStreamAndKeepNothing) {
  BulkInbox inbox;
  BulkReceiver receiver(BulkReceiver::KeyIs(kKey), inbox);
  Server server({&receiver});
  auto send = [&](grpc::ByteBuffer frame) {
    return SendOneFrame(server.address, kKey, std::move(frame));
  };
  grpc::Slice junk(std::string("not a frame"));
  grpc::Status s = send(grpc::ByteBuffer(&junk, 1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("is not a BulkFrame header"));
  // Data past the micro-batch's end, and a payload beyond any receiver.
  char bytes[16] = {};
  s = send(EncodeBulkFrame({7, 1, 8, 16, 16}, bytes, 16, Keep, nullptr));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("do not fit a payload of 16"));
  s = send(EncodeBulkFrame({7, 2, 0, uint64_t{1} << 50, 16}, bytes, 16, Keep,
                           nullptr));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A frame that fits, of a micro-batch whose other half never comes: the
  // link's stream ended, so it is dropped.
  s = send(EncodeBulkFrame({7, 3, 0, 32, 32}, bytes, 16, Keep, nullptr));
  EXPECT_TRUE(s.ok()) << s.error_message();
  for (int i = 0; i < 100 && inbox.held_micro_batches() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(inbox.held_micro_batches(), 0);
  EXPECT_EQ(inbox.held_bytes(), 0u);
}

// A stream without the link's data key, or with another, is refused before
// a frame is read: a stranger fills no receive buffer.
TEST(BulkChannel, AStreamWithoutTheDataKeyIsRefusedAndKeepsNothing) {
  BulkInbox inbox;
  BulkReceiver receiver(BulkReceiver::KeyIs(kKey), inbox);
  Server server({&receiver});
  char bytes[16] = {};
  for (const std::string key : {std::string(), std::string("other-key")}) {
    grpc::Status s = SendOneFrame(
        server.address, key,
        EncodeBulkFrame({7, 3, 0, 32, 32}, bytes, 16, Keep, nullptr));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << key;
    EXPECT_THAT(s.error_message(), HasSubstr("not the data key")) << key;
    EXPECT_EQ(inbox.held_bytes(), 0u);
  }
  EXPECT_TRUE(
      SendOneFrame(server.address, kKey,
                   EncodeBulkFrame({7, 4, 0, 16, 16}, bytes, 16, Keep, nullptr))
          .ok());
}

TEST(BulkInbox, PayloadsPastTheLimitAreRefusedNamingIt) {
  BulkInbox inbox;
  inbox.SetMaxHeldBytes(100);
  inbox.Opened(1);
  ASSERT_TRUE(inbox.Reserve(1, 1, 64, 64, 0, 8).ok());
  auto over = inbox.Reserve(1, 2, 64, 64, 0, 8);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("--max-receive-bytes"));
  EXPECT_THAT(over.status().message(), HasSubstr("limit of 100 bytes"));
  inbox.Closed(1);
  EXPECT_EQ(inbox.held_bytes(), 0u);
}

TEST(BulkInbox, AMicroBatchIsTakenOnceAndALinkThatEndsKeepsNothing) {
  BulkInbox inbox;
  inbox.Opened(1);
  auto a = inbox.Reserve(1, 10, 64, 8, 0, 8);
  ASSERT_TRUE(a.ok()) << a.status();
  std::memset(a->get(), 7, 8);
  inbox.Arrived(1, 10, 8);
  auto b = inbox.Reserve(1, 11, 64, 16, 0, 8);  // half of it
  ASSERT_TRUE(b.ok());
  inbox.Arrived(1, 11, 8);
  // Disagreeing frames are refused.
  EXPECT_FALSE(inbox.Reserve(1, 10, 128, 8, 0, 8).ok());
  EXPECT_FALSE(inbox.Reserve(1, 10, 64, 8, 8, 8).ok());  // more than 8
  EXPECT_EQ(inbox.held_micro_batches(), 2);
  auto got = inbox.Take(1, 10);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->second, 64u);
  EXPECT_EQ(got->first.get()[0], 7);
  EXPECT_EQ(inbox.Take(1, 10).status().code(), absl::StatusCode::kNotFound);
  // The link's last stream ends: the half micro-batch goes with it.
  inbox.Closed(1);
  EXPECT_EQ(inbox.held_micro_batches(), 0);
  auto missing = inbox.Take(1, 11);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("never arrived here"));
  // A half micro-batch taken while its link is open names what is missing.
  inbox.Opened(2);
  ASSERT_TRUE(inbox.Reserve(2, 1, 64, 32, 0, 16).ok());
  inbox.Arrived(2, 1, 16);
  auto half = inbox.Take(2, 1);
  EXPECT_EQ(half.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(half.status().message(), HasSubstr("16 of 32 bytes arrived"));
  inbox.Closed(2);
}

}  // namespace
}  // namespace petra::link
