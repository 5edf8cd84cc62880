#include "services/wire/tensor_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace petra::wire {
namespace {

using ::testing::HasSubstr;

petra::v1::Tensor Header(petra::v1::DType dtype, std::vector<int64_t> shape) {
  petra::v1::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

TEST(TensorValidation, ItemSizes) {
  EXPECT_EQ(*DTypeItemSize(petra::v1::DTYPE_FLOAT32, "t"), 4u);
  EXPECT_EQ(*DTypeItemSize(petra::v1::DTYPE_FLOAT16, "t"), 2u);
  EXPECT_EQ(*DTypeItemSize(petra::v1::DTYPE_BFLOAT16, "t"), 2u);
  EXPECT_EQ(*DTypeItemSize(petra::v1::DTYPE_FLOAT64, "t"), 8u);
  EXPECT_EQ(*DTypeItemSize(petra::v1::DTYPE_INT64, "t"), 8u);
  EXPECT_EQ(*DTypeItemSize(petra::v1::DTYPE_INT32, "t"), 4u);
  EXPECT_EQ(*DTypeItemSize(petra::v1::DTYPE_UINT8, "t"), 1u);
  EXPECT_FALSE(DTypeItemSize(petra::v1::DTYPE_UNSPECIFIED, "t").ok());
  EXPECT_FALSE(DTypeItemSize(8, "t").ok());
  EXPECT_FALSE(DTypeItemSize(-1, "t").ok());
}

TEST(TensorValidation, ExpectedBytes) {
  TensorLimits limits;
  EXPECT_EQ(*ExpectedPayloadBytes(Header(petra::v1::DTYPE_INT64, {3, 4}),
                                  limits, "t"),
            96u);
  EXPECT_EQ(
      *ExpectedPayloadBytes(Header(petra::v1::DTYPE_UINT8, {}), limits, "t"),
      1u);
  // A zero dimension makes an empty tensor ...
  EXPECT_EQ(*ExpectedPayloadBytes(Header(petra::v1::DTYPE_FLOAT32, {0, 3, 28}),
                                  limits, "t"),
            0u);
  // ... but its other dimensions are held to the limit all the same: torch
  // multiplies them into strides.
  absl::StatusOr<uint64_t> empty_but_huge = ExpectedPayloadBytes(
      Header(petra::v1::DTYPE_FLOAT32, {int64_t{1} << 40, int64_t{1} << 40, 0}),
      limits, "t");
  ASSERT_FALSE(empty_but_huge.ok());
  EXPECT_THAT(std::string(empty_but_huge.status().message()),
              HasSubstr("overflows 64 bits"));
  empty_but_huge = ExpectedPayloadBytes(
      Header(petra::v1::DTYPE_UINT8, {0, int64_t{1} << 31}), limits, "t");
  ASSERT_FALSE(empty_but_huge.ok());
  EXPECT_THAT(std::string(empty_but_huge.status().message()),
              HasSubstr("without its zero dimension"));
}

// Huge shapes are refused from the header alone, before anything is
// allocated: products past 64 bits (which must not wrap around to a small
// size), and sizes past the byte cap.
TEST(TensorValidation, HugeShapesAreRefusedFromTheHeader) {
  const TensorLimits limits;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {int64_t{1} << 40, int64_t{1} << 40},
           {int64_t{1} << 62, 4},  // 2^64 elements: wraps to 0 unchecked
           {int64_t{1} << 32, int64_t{1} << 32, 1},
           {std::numeric_limits<int64_t>::max()},
           {int64_t{1} << 28, 2}}) {  // 2^29 float32 = 2 GiB > 1 GiB cap
    petra::v1::Tensor t = Header(petra::v1::DTYPE_FLOAT32, shape);
    absl::StatusOr<uint64_t> r = ExpectedPayloadBytes(t, limits, "x");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << t.ShortDebugString();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("x.shape"));
    EXPECT_EQ(ValidateTensor(t, limits, "x").code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(TensorValidation, RankLimitIsConfigurable) {
  TensorLimits limits;
  limits.max_rank = 2;
  absl::StatusOr<uint64_t> r = ExpectedPayloadBytes(
      Header(petra::v1::DTYPE_FLOAT32, {1, 1, 1}), limits, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("x.shape: rank 3"));
  // Exactly 8 is allowed by default.
  EXPECT_TRUE(ExpectedPayloadBytes(
                  Header(petra::v1::DTYPE_FLOAT32, {1, 1, 1, 1, 1, 1, 1, 1}),
                  TensorLimits{}, "x")
                  .ok());
}

TEST(TensorValidation, ByteCapIsInclusive) {
  TensorLimits limits;
  limits.max_bytes = 16;
  EXPECT_TRUE(
      ExpectedPayloadBytes(Header(petra::v1::DTYPE_FLOAT32, {4}), limits, "t")
          .ok());
  EXPECT_FALSE(
      ExpectedPayloadBytes(Header(petra::v1::DTYPE_FLOAT32, {5}), limits, "t")
          .ok());
}

TEST(TensorValidation, DTypeNames) {
  EXPECT_EQ(DTypeName(petra::v1::DTYPE_BFLOAT16), "bfloat16");
  EXPECT_EQ(DTypeName(77), "dtype(77)");
}

}  // namespace
}  // namespace petra::wire
