#include "services/link/shared_ring.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace petra::link {
namespace {

using ::testing::HasSubstr;

absl::Status KeepGoing() { return absl::OkStatus(); }

bool NameExists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

TEST(SharedRing, CarriesBytesFromOneMappingToAnother) {
  auto ring = SharedRing::Create(2, 100);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ((*ring)->slot_bytes(), 128u);  // rounded to a cache line
  auto lease = (*ring)->Acquire(KeepGoing);
  ASSERT_TRUE(lease.ok());
  std::memcpy(lease->data, "hello", 5);
  (*ring)->Publish(*lease);
  EXPECT_FALSE((*ring)->Idle());

  auto reader = SharedRing::Open((*ring)->name());
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto bytes = (*reader)->Read(lease->index, lease->sequence, 0, 5);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(*bytes), 5), "hello");
  (*reader)->Free(lease->index, lease->sequence);
  EXPECT_TRUE((*ring)->Idle());
}

TEST(SharedRing, TheReceiverUnlinksTheNameOnceBothEndsHaveIt) {
  auto ring = SharedRing::Create(1, 64);
  ASSERT_TRUE(ring.ok());
  const std::string name = (*ring)->name();
  EXPECT_TRUE(NameExists(name));
  auto reader = SharedRing::Open(name);
  ASSERT_TRUE(reader.ok());
  EXPECT_FALSE(NameExists(name));
  EXPECT_EQ(CountRingNames(getpid()), 0);
  EXPECT_EQ(CountRingMappings(getpid()), 1);  // one segment, mapped twice
  reader->reset();
  ring->reset();
  EXPECT_EQ(CountRingMappings(getpid()), 0);
}

TEST(SharedRing, ARingNobodyOpenedIsUnlinkedWithItsSender) {
  std::string name;
  {
    auto ring = SharedRing::Create(1, 64);
    ASSERT_TRUE(ring.ok());
    name = (*ring)->name();
    EXPECT_EQ(CountRingNames(getpid()), 1);
  }
  EXPECT_FALSE(NameExists(name));
  EXPECT_EQ(CountRingNames(getpid()), 0);
}

TEST(SharedRing, ReadRefusesWhatTheSlotDoesNotHold) {
  auto ring = SharedRing::Create(2, 64);
  ASSERT_TRUE(ring.ok());
  auto lease = (*ring)->Acquire(KeepGoing);
  ASSERT_TRUE(lease.ok());
  // Not published yet.
  EXPECT_THAT(
      (*ring)->Read(lease->index, lease->sequence, 0, 8).status().message(),
      HasSubstr("stale or repeated"));
  (*ring)->Publish(*lease);
  EXPECT_TRUE((*ring)->Read(lease->index, lease->sequence, 0, 64).ok());
  EXPECT_THAT(
      (*ring)->Read(lease->index, lease->sequence, 8, 64).status().message(),
      HasSubstr("overrun"));
  EXPECT_THAT(
      (*ring)->Read(lease->index, lease->sequence + 1, 0, 8).status().message(),
      HasSubstr("stale or repeated"));
  EXPECT_THAT((*ring)->Read(7, lease->sequence, 0, 8).status().message(),
              HasSubstr("which has 2"));
  EXPECT_FALSE(
      (*ring)->Read(lease->index, lease->sequence, ~uint64_t{0}, 2).ok());
  (*ring)->Free(lease->index, lease->sequence + 1);  // stale: no effect
  EXPECT_FALSE((*ring)->Idle());
  (*ring)->Free(lease->index, lease->sequence);
  // Freed: the same reference is now a replay.
  EXPECT_FALSE((*ring)->Read(lease->index, lease->sequence, 0, 8).ok());
}

TEST(SharedRing, ASenderWaitsForAFreeSlotAndWakesWhenOneIsFreed) {
  auto ring = SharedRing::Create(1, 64);
  ASSERT_TRUE(ring.ok());
  auto first = (*ring)->Acquire(KeepGoing);
  ASSERT_TRUE(first.ok());
  (*ring)->Publish(*first);
  auto reader = SharedRing::Open((*ring)->name());
  ASSERT_TRUE(reader.ok());
  std::atomic<bool> got{false};
  std::thread sender([&] {
    auto second = (*ring)->Acquire(KeepGoing);
    EXPECT_TRUE(second.ok());
    EXPECT_EQ(second->sequence, first->sequence + 1);
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_FALSE(got);  // the only slot is full
  (*reader)->Free(first->index, first->sequence);
  sender.join();
  EXPECT_TRUE(got);
}

TEST(SharedRing, AWaitEndsWithTheErrorOfItsCheck) {
  auto ring = SharedRing::Create(1, 64);
  ASSERT_TRUE(ring.ok());
  auto first = (*ring)->Acquire(KeepGoing);
  ASSERT_TRUE(first.ok());
  (*ring)->Publish(*first);
  int asked = 0;
  auto second = (*ring)->Acquire([&] {
    return ++asked < 3 ? absl::OkStatus()
                       : absl::UnavailableError("the receiver is gone");
  });
  EXPECT_THAT(second.status().message(), HasSubstr("the receiver is gone"));
  EXPECT_EQ(asked, 3);
}

TEST(SharedRing, OpenRefusesWhatIsNotARing) {
  EXPECT_EQ(SharedRing::Open("/etc-passwd").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedRing::Open("/petra-1-2-3/../x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedRing::Open("/petra-0-1-999999").status().code(),
            absl::StatusCode::kNotFound);
  // A segment with our kind of name but not a ring's header.
  const std::string fake = "/petra-0-" + std::to_string(getpid()) + "-77";
  const int fd = shm_open(fake.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  close(fd);
  auto opened = SharedRing::Open(fake);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(opened.status().message(), HasSubstr("not hold a valid ring"));
  shm_unlink(fake.c_str());
}

TEST(SharedRing, CreateRefusesSizesItCannotHold) {
  EXPECT_FALSE(SharedRing::Create(0, 64).ok());
  EXPECT_FALSE(SharedRing::Create(kMaxRingSlots + 1, 64).ok());
  EXPECT_FALSE(SharedRing::Create(1, 0).ok());
  EXPECT_FALSE(SharedRing::Create(1, kMaxSlotBytes + 1).ok());
}

TEST(SharedRing, TheRingsOfADeadProcessAreSwept) {
  // A child makes two rings and dies without unlinking them (as a crash
  // would); the sweep removes both and nothing else.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto a = SharedRing::Create(1, 64);
    auto b = SharedRing::Create(1, 64);
    const char ok = a.ok() && b.ok() ? 'y' : 'n';
    (void)!write(pipefd[1], &ok, 1);
    _exit(0);  // no destructors: the names stay
  }
  char ok = 0;
  ASSERT_EQ(read(pipefd[0], &ok, 1), 1);
  close(pipefd[0]);
  close(pipefd[1]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(ok, 'y');
  EXPECT_EQ(CountRingNames(child), 2);
  auto mine = SharedRing::Create(1, 64);  // alive: not swept
  ASSERT_TRUE(mine.ok());
  EXPECT_GE(SweepOrphanRings(), 2);
  EXPECT_EQ(CountRingNames(child), 0);
  EXPECT_EQ(CountRingNames(getpid()), 1);
}

}  // namespace
}  // namespace petra::link
