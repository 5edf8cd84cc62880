#include "services/wire/tensor_chunks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>

namespace petra::wire {
namespace {

using ::testing::HasSubstr;

petra::v1::Tensor Float32Tensor(int64_t n) {
  petra::v1::Tensor t;
  t.set_dtype(petra::v1::DTYPE_FLOAT32);
  t.add_shape(n);
  std::string data(n * 4, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  t.set_data(data);
  return t;
}

TEST(TensorChunks, SmallTensorIsOneUnchunkedMessage) {
  petra::v1::Tensor t = Float32Tensor(10);
  std::vector<petra::v1::Tensor> parts = SplitTensor(t, 40);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_FALSE(parts[0].has_chunk());
  EXPECT_EQ(parts[0].data(), t.data());
}

TEST(TensorChunks, SplitAndReassemble) {
  petra::v1::Tensor t = Float32Tensor(1000);  // 4000 bytes
  std::vector<petra::v1::Tensor> parts = SplitTensor(t, 1024);
  ASSERT_EQ(parts.size(), 4u);
  uint64_t offset = 0;
  for (const petra::v1::Tensor& p : parts) {
    EXPECT_EQ(p.chunk().offset(), offset);
    EXPECT_EQ(p.chunk().total_bytes(), 4000u);
    EXPECT_LE(p.data().size(), 1024u);
    EXPECT_EQ(p.dtype(), petra::v1::DTYPE_FLOAT32);
    offset += p.data().size();
  }
  TensorAssembler assembler("activation.first");
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_FALSE(assembler.complete());
    ASSERT_TRUE(assembler.Add(parts[i]).ok());
  }
  ASSERT_TRUE(assembler.complete());
  absl::StatusOr<petra::v1::Tensor> whole = assembler.Take();
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->has_chunk());
  EXPECT_EQ(whole->data(), t.data());
  EXPECT_FALSE(assembler.complete());  // ready for the next tensor
}

TEST(TensorChunks, WholeTensorPassesThroughAssembler) {
  TensorAssembler assembler;
  ASSERT_TRUE(assembler.Add(Float32Tensor(3)).ok());
  EXPECT_TRUE(assembler.complete());
}

TEST(TensorChunks, AClaimedPayloadIsNotReservedWhole) {
  // A first chunk declaring 1 GiB (the default limit) with one byte of data:
  // memory grows with the bytes that arrive, not with the claim.
  petra::v1::Tensor first;
  first.set_dtype(petra::v1::DTYPE_UINT8);
  first.add_shape(int64_t{1} << 30);
  first.mutable_chunk()->set_total_bytes(uint64_t{1} << 30);
  first.set_data("x");
  const size_t mapped_before = mallinfo2().hblkhd;
  TensorAssembler assembler;
  ASSERT_TRUE(assembler.Add(first).ok());
  const size_t mapped_after = mallinfo2().hblkhd;
  EXPECT_LT(mapped_after, mapped_before + (size_t{128} << 20))
      << "the assembler reserved " << (mapped_after - mapped_before)
      << " bytes for one byte received";
  EXPECT_FALSE(assembler.complete());
}

TEST(TensorChunks, TakeBeforeCompleteFails) {
  TensorAssembler assembler;
  std::vector<petra::v1::Tensor> parts = SplitTensor(Float32Tensor(100), 64);
  ASSERT_TRUE(assembler.Add(parts[0]).ok());
  absl::StatusOr<petra::v1::Tensor> r = assembler.Take();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("64 of 400 bytes"));
}

struct BadChunkCase {
  std::string name;
  // Mutates the chunk sequence before it is fed to the assembler.
  std::function<void(std::vector<petra::v1::Tensor>&)> corrupt;
  std::string expected;
};

// Test names carry the case name; print only that, not the bytes.
void PrintTo(const BadChunkCase& c, std::ostream* os) { *os << c.name; }

class BadChunks : public ::testing::TestWithParam<BadChunkCase> {};

TEST_P(BadChunks, AreRefused) {
  std::vector<petra::v1::Tensor> parts = SplitTensor(Float32Tensor(100), 128);
  ASSERT_EQ(parts.size(), 4u);
  GetParam().corrupt(parts);
  TensorLimits limits;
  limits.max_bytes = 1 << 16;
  TensorAssembler assembler("gradient.second", limits);
  absl::Status failure;
  for (const petra::v1::Tensor& p : parts) {
    failure = assembler.Add(p);
    if (!failure.ok()) break;
  }
  ASSERT_FALSE(failure.ok()) << "no chunk was refused";
  EXPECT_EQ(failure.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(failure.message()), HasSubstr("gradient.second"));
  EXPECT_THAT(std::string(failure.message()), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    AllCases, BadChunks,
    ::testing::Values(
        BadChunkCase{"OutOfOrder", [](auto& p) { std::swap(p[1], p[2]); },
                     "expected 128"},
        BadChunkCase{"FirstNotAtZero", [](auto& p) { p.erase(p.begin()); },
                     "first chunk starts at 128"},
        BadChunkCase{"Duplicate",
                     [](auto& p) { p.insert(p.begin() + 2, p[1]); },
                     "offset: 128, expected 256"},
        BadChunkCase{"TotalDisagreesWithShape",
                     [](auto& p) {
                       for (auto& c : p)
                         c.mutable_chunk()->set_total_bytes(404);
                     },
                     "total_bytes: 404, but the shape needs 400"},
        BadChunkCase{
            "TotalChangesMidway",
            [](auto& p) { p[2].mutable_chunk()->set_total_bytes(512); },
            "differs"},
        BadChunkCase{"ShapeChangesMidway",
                     [](auto& p) { p[1].set_shape(0, 99); },
                     "dtype or shape changed"},
        BadChunkCase{"ContinuationWithoutChunkInfo",
                     [](auto& p) { p[1].clear_chunk(); }, "missing"},
        BadChunkCase{
            "Overrun",
            [](auto& p) { p[3].mutable_data()->append(std::string(100, 'x')); },
            "overruns"},
        BadChunkCase{"ExtraChunkAfterComplete",
                     [](auto& p) { p.push_back(p[3]); },
                     "after the tensor was complete"},
        BadChunkCase{"HeaderOverCap",
                     [](auto& p) {
                       p[0].set_shape(0, 1 << 20);
                       p[0].mutable_chunk()->set_total_bytes(4 << 20);
                     },
                     "over the limit"},
        BadChunkCase{"EmptyChunk", [](auto& p) { p[1].clear_data(); },
                     "empty chunk"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace petra::wire
