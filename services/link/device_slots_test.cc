// Transport cuda_ipc's protocol (device_slots.h) over the host stand-in of
// a device runtime: the same slot states, sequences and faults as shared
// memory, with the payload in memory that is exported, mapped and counted
// as CUDA's would be. Each fault ends with every count at zero: no region
// exported or mapped, no event, no receive buffer.
#include "services/link/device_slots.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "services/link/shared_ring_channel.h"

namespace petra::link {
namespace {

using ::testing::HasSubstr;

IpcDevice& Device() { return HostIpcDevice(); }

// Stand-in regions this process holds open (as files, mapped or not).
int OpenRegionFiles() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("/memfd:petra-ipc-stand-in", 0) == 0) ++n;
  }
  return n;
}

void ExpectNothingHeld() {
  const IpcCounts c = Device().counts();
  EXPECT_EQ(c.exported_regions, 0);
  EXPECT_EQ(c.mapped_regions, 0);
  EXPECT_EQ(c.events, 0);
  EXPECT_EQ(c.opened_events, 0);
  EXPECT_EQ(c.local_buffers, 0);
  EXPECT_EQ(OpenRegionFiles(), 0);
  EXPECT_EQ(CountRingMappings(getpid()), 0);
}

absl::Status GoOn() { return absl::OkStatus(); }

// Writes `text` into the next slot and publishes it.
SharedRing::Lease Send(DeviceSlots& ring, const std::string& text) {
  auto lease = ring.control().Acquire(GoOn);
  EXPECT_TRUE(lease.ok());
  std::vector<wire::PayloadPiece> pieces = {{text.data(), text.size()}};
  EXPECT_TRUE(ring.Write(*lease, pieces, LayOut(pieces)).ok());
  ring.control().Publish(*lease);
  return *lease;
}

TEST(DeviceSlots, CarryBytesThroughExportedMemoryAndLeaveNothingBehind) {
  {
    auto ring = DeviceSlots::Create(Device(), 2, 100);
    ASSERT_TRUE(ring.ok()) << ring.status();
    EXPECT_EQ((*ring)->slot_bytes(), 128u);
    EXPECT_EQ((*ring)->control().medium(),
              static_cast<uint32_t>(IpcKind::kHostStandIn));
    EXPECT_EQ(Device().counts().exported_regions, 1);
    EXPECT_EQ(Device().counts().events, 2);  // one per slot

    auto control = SharedRing::Open((*ring)->control().name());
    ASSERT_TRUE(control.ok()) << control.status();
    DeviceSlotsView view(Device(), **control);
    for (int i = 0; i < 5; ++i) {  // around the ring, twice and more
      const std::string text = absl::StrCat("micro-batch ", i);
      const SharedRing::Lease lease = Send(**ring, text);
      std::string out(text.size(), '\0');
      ASSERT_TRUE(
          view.CopyOut(lease.index, lease.sequence, 0, text.size(), out.data())
              .ok());
      EXPECT_EQ(out, text);
      (*control)->Free(lease.index, lease.sequence);
    }
    // Mapped once, each slot's event opened once.
    EXPECT_EQ(Device().counts().mapped_regions, 1);
    EXPECT_EQ(Device().counts().opened_events, 2);
  }
  ExpectNothingHeld();
}

TEST(DeviceSlots, TheReceiverRefusesStaleOverrunAndForgedReferences) {
  {
    auto ring = DeviceSlots::Create(Device(), 2, 64);
    ASSERT_TRUE(ring.ok());
    auto control = SharedRing::Open((*ring)->control().name());
    ASSERT_TRUE(control.ok());
    DeviceSlotsView view(Device(), **control);
    const SharedRing::Lease lease = Send(**ring, "abc");
    char out[128];
    EXPECT_THAT(
        view.CopyOut(lease.index, lease.sequence + 1, 0, 3, out).message(),
        HasSubstr("stale or repeated"));
    EXPECT_THAT(view.CopyOut(lease.index, lease.sequence, 60, 8, out).message(),
                HasSubstr("overrun"));
    EXPECT_THAT(view.CopyOut(7, lease.sequence, 0, 3, out).message(),
                HasSubstr("slot 7"));
    // The next slot's descriptor names another region: refused.
    auto next = (*ring)->control().Acquire(GoOn);
    ASSERT_TRUE(next.ok());
    std::memset((*ring)->control().SlotData(next->index) + 24, 0x5a, 8);
    (*ring)->control().Publish(*next);
    const absl::Status forged =
        view.CopyOut(next->index, next->sequence, 0, 3, out);
    EXPECT_EQ(forged.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(forged.message(), HasSubstr("names another region"));
  }
  ExpectNothingHeld();
}

// Blocks until the child wrote one byte, which it returns.
char ReadByte(int fd) {
  char c = 0;
  EXPECT_EQ(read(fd, &c, 1), 1);
  return c;
}

TEST(DeviceSlots, AReceiverKilledWhileHoldingASlotLeavesNothing) {
  {
    auto ring = DeviceSlots::Create(Device(), 1, 64);
    ASSERT_TRUE(ring.ok());
    const SharedRing::Lease lease = Send(**ring, "held");
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Maps the ring and its memory, reads the slot and never frees it.
      auto control = SharedRing::Open((*ring)->control().name());
      char out[8] = {};
      bool ok = control.ok();
      if (ok) {
        DeviceSlotsView view(Device(), **control);
        ok = view.CopyOut(lease.index, lease.sequence, 0, 4, out).ok() &&
             std::string(out, 4) == "held";
        const char c = ok ? 'y' : 'n';
        (void)!write(pipefd[1], &c, 1);
        pause();
      }
      _exit(1);
    }
    ASSERT_EQ(ReadByte(pipefd[0]), 'y');
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    close(pipefd[0]);
    close(pipefd[1]);
    // The sender's wait for the slot ends with its check's error (the
    // stream reports its receiver gone).
    auto wait = (*ring)->control().Acquire(
        [] { return absl::UnavailableError("the receiver is gone"); });
    EXPECT_EQ(wait.status().code(), absl::StatusCode::kUnavailable);
  }
  ExpectNothingHeld();
}

// A sender in a child process: publishes `count` micro-batches of 4 floats
// (the last one `last`), naming each on `out` after the parent's go-ahead
// on `in`, then waits to be killed holding its ring.
pid_t StartSender(int count, float last, int in, int out) {
  const pid_t child = fork();
  if (child != 0) return child;
  SharedRingPlacer placer({}, 2, false, 0, &Device());
  for (int i = 0; i < count; ++i) {
    char go = 0;
    if (i > 0 && read(in, &go, 1) != 1) _exit(1);
    const float x[4] = {1, 2, 3, i + 1 == count ? last : 0.0f};
    auto refs = placer.Place({{x, sizeof(x)}});
    const std::string msg = refs.ok() ? refs->front().SerializeAsString() : "";
    const uint32_t n = static_cast<uint32_t>(msg.size());
    (void)!write(out, &n, sizeof(n));
    (void)!write(out, msg.data(), n);
  }
  pause();
  _exit(1);
}

// The next reference a sender named, as a float32[4] tensor's slot.
petra::v1::Tensor NextReference(int fd) {
  uint32_t n = 0;
  EXPECT_EQ(read(fd, &n, sizeof(n)), static_cast<ssize_t>(sizeof(n)));
  std::string msg(n, '\0');
  EXPECT_EQ(read(fd, msg.data(), n), static_cast<ssize_t>(n));
  petra::v1::Tensor t;
  t.set_dtype(petra::v1::DTYPE_FLOAT32);
  t.add_shape(4);
  EXPECT_TRUE(t.mutable_slot()->ParseFromString(msg));
  return t;
}

absl::StatusOr<float> FetchLast(wire::PayloadFetcher& fetcher,
                                petra::v1::Tensor t) {
  std::vector<wire::PayloadFetcher::Field> fields = {{&t, "x", nullptr}};
  if (absl::Status s = fetcher.Fetch(fields, {}); !s.ok()) return s;
  EXPECT_EQ(fields[0].device, -1);  // the stand-in's memory is the host's
  return static_cast<const float*>(fields[0].bytes.get())[3];
}

TEST(DeviceSlots,
     ASenderKilledMidTransferLeavesTheReceiverCleanAndARestartCarriesOn) {
  auto fetcher = std::make_unique<SharedRingFetcher>();
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  // Killed after its second micro-batch was published, before it was read:
  // the receiver mapped the ring at the first, and reads the second.
  pid_t child = StartSender(2, 7.0f, to_child[0], from_child[1]);
  ASSERT_GT(child, 0);
  EXPECT_EQ(FetchLast(*fetcher, NextReference(from_child[0])).value_or(-1),
            0.0f);
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  petra::v1::Tensor second = NextReference(from_child[0]);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(FetchLast(*fetcher, second).value_or(-1), 7.0f);

  // Killed before the receiver ever mapped its memory: a clear error.
  child = StartSender(1, 8.0f, to_child[0], from_child[1]);
  petra::v1::Tensor orphan = NextReference(from_child[0]);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  absl::StatusOr<float> gone = FetchLast(*fetcher, orphan);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("the sender is gone"));

  // The restarted sender's micro-batches cross as before.
  child = StartSender(1, 9.0f, to_child[0], from_child[1]);
  EXPECT_EQ(FetchLast(*fetcher, NextReference(from_child[0])).value_or(-1),
            9.0f);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) {
    close(fd);
  }
  EXPECT_EQ(Device().counts().mapped_regions, 2);  // the living senders'
  fetcher.reset();
  ExpectNothingHeld();
  EXPECT_EQ(SweepOrphanRings(), 0);  // the receiver unlinked every name
}

TEST(DeviceSlots, ACancelEndsAWaitForAFullRingAndTheRingGoesWithItsPlacer) {
  {
    SharedRingPlacer placer({}, /*slots=*/1, false, 0, &Device());
    EXPECT_STREQ(placer.name(), "cuda_ipc");
    EXPECT_TRUE(placer.takes_device_pieces());
    const float x = 1;
    ASSERT_TRUE(placer.Place({{&x, sizeof(x)}}).ok());  // nobody reads it
    std::thread cancel([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      placer.Cancel();
    });
    auto second = placer.Place({{&x, sizeof(x)}});
    cancel.join();
    EXPECT_EQ(second.status().code(), absl::StatusCode::kCancelled);
  }
  ExpectNothingHeld();
}

TEST(DeviceSlots, ARingOutgrownIsReplacedAndTheOldOneGoesOnceRead) {
  {
    SharedRingPlacer placer({}, 2, false, 0, &Device());
    SharedRingFetcher fetcher;
    for (int64_t n : {4, 4, 64, 1024, 8}) {
      std::vector<float> x(n, 0.5f);
      auto refs = placer.Place({{x.data(), x.size() * sizeof(float)}});
      ASSERT_TRUE(refs.ok()) << refs.status();
      petra::v1::Tensor t;
      t.set_dtype(petra::v1::DTYPE_FLOAT32);
      t.add_shape(n);
      *t.mutable_slot() = refs->front();
      std::vector<wire::PayloadFetcher::Field> fields = {{&t, "x", nullptr}};
      ASSERT_TRUE(fetcher.Fetch(fields, {}).ok());
      EXPECT_EQ(static_cast<const float*>(fields[0].bytes.get())[n - 1], 0.5f);
    }
    EXPECT_EQ(placer.rings(), 1);  // the outgrown ones were read and let go
  }
  ExpectNothingHeld();
}

TEST(SharedMemoryChannelHostOnly, RefusesADeviceTensor) {
  SharedRingPlacer placer;
  const float x = 1;
  wire::PayloadPiece on_gpu{&x, sizeof(x), 0};
  EXPECT_THAT(placer.Place({on_gpu}).status().message(),
              HasSubstr("carries host memory only"));
}

}  // namespace
}  // namespace petra::link
