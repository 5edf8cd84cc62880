#include "services/base/durable_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "services/base/paths.h"

namespace petra::base {
namespace {

// Found by the chaos campaign: a full state disk failed a checkpoint with
// "writing ....tmp failed", no cause, and left the partial .tmp file behind
// to fill the disk further. A file-size limit makes the write fail the way
// a full disk does (EFBIG in place of ENOSPC), even for root.
TEST(WriteFileAtomically, AFailedWriteSaysWhyAndLeavesNothing) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("petra-durable-", ::getpid());
  std::filesystem::create_directories(dir);
  struct rlimit before;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = before;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status s =
      WriteFileAtomically(dir / "stage-0.pt", std::string(1 << 16, 'x'));
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("File too large"));
  EXPECT_FALSE(std::filesystem::exists(dir / "stage-0.pt.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir / "stage-0.pt"));
  // And a write that fits still lands whole.
  ASSERT_TRUE(WriteFileAtomically(dir / "stage-0.pt", "bytes").ok());
  EXPECT_EQ(std::filesystem::file_size(dir / "stage-0.pt"), 5u);
  petra::base::RemoveTree(dir).IgnoreError();
}

// `petra train --output model.pt`: a bare name lands in the working
// directory (it failed with "cannot create : Invalid argument").
TEST(WriteFileAtomically, ABareFileNameLandsInTheWorkingDirectory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("petra-durable-bare-", ::getpid());
  std::filesystem::create_directories(dir);
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const absl::Status s = WriteFileAtomically("model.pt", "bytes");
  std::filesystem::current_path(before);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::filesystem::file_size(dir / "model.pt"), 5u);
  petra::base::RemoveTree(dir).IgnoreError();
}

// A checkpoint streamed to disk in pieces: the file is the pieces in order,
// its size and SHA-256 are the whole's, and nothing appears before Commit
// (nor after an abandoned write).
TEST(AtomicFile, PiecesLandWholeOnCommitWithTheirChecksum) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("petra-durable-pieces-", ::getpid());
  const std::filesystem::path path = dir / "a" / "stage-1.pt";
  std::string whole;
  {
    absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::Create(path);
    ASSERT_TRUE(file.ok()) << file.status();
    for (int i = 0; i < 100; ++i) {
      const std::string piece(1000 + i, static_cast<char>('a' + i % 26));
      whole += piece;
      ASSERT_TRUE((*file)->Append(piece.data(), piece.size()).ok());
    }
    EXPECT_FALSE(std::filesystem::exists(path));
    ASSERT_TRUE((*file)->Commit().ok());
    EXPECT_EQ((*file)->size(), whole.size());
    EXPECT_EQ((*file)->sha256(), Sha256Hex(whole));
  }
  EXPECT_EQ(std::filesystem::file_size(path), whole.size());
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  // Read back a megabyte at a time, the file has the checksum it was
  // written with.
  absl::StatusOr<std::string> read_back = Sha256OfFile(path);
  ASSERT_TRUE(read_back.ok()) << read_back.status();
  EXPECT_EQ(*read_back, Sha256Hex(whole));
  const std::string big(3 << 20, 'z');
  ASSERT_TRUE(WriteFileAtomically(dir / "big", big).ok());
  EXPECT_EQ(*Sha256OfFile(dir / "big"), Sha256Hex(big));
  EXPECT_EQ(Sha256OfFile(dir / "none").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Sha256OfFile(dir / "none").status().message(), "none is missing");
  {
    absl::StatusOr<std::unique_ptr<AtomicFile>> abandoned =
        AtomicFile::Create(dir / "b.pt");
    ASSERT_TRUE(abandoned.ok());
    ASSERT_TRUE((*abandoned)->Append("xy", 2).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "b.pt"));
  EXPECT_FALSE(std::filesystem::exists(dir / "b.pt.tmp"));
  petra::base::RemoveTree(dir).IgnoreError();
}

}  // namespace
}  // namespace petra::base
