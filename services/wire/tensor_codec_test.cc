#include "services/wire/tensor_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "services/wire/tensor_chunks.h"
#include "services/wire/tensor_validation.h"

namespace petra::wire {
namespace {

using ::testing::HasSubstr;

struct DTypeCase {
  c10::ScalarType torch_type;
  petra::v1::DType wire_type;
  int item_size;
};

void PrintTo(const DTypeCase& c, std::ostream* os) {
  *os << c10::toString(c.torch_type);
}

class CodecRoundTrip : public ::testing::TestWithParam<DTypeCase> {};

// Values that exercise every dtype's range: negatives (signed), large
// magnitudes, fractions that round in half precision.
at::Tensor Sample(c10::ScalarType t, std::vector<int64_t> shape) {
  torch::manual_seed(7);
  at::Tensor base = torch::randn(shape, torch::kFloat64) * 100;
  if (t == torch::kUInt8) base = base.abs();
  return base.to(t);
}

TEST_P(CodecRoundTrip, PreservesDtypeShapeAndValues) {
  const DTypeCase& c = GetParam();
  at::Tensor original = Sample(c.torch_type, {2, 3, 5});
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(original, &wire).ok());
  EXPECT_EQ(wire.dtype(), c.wire_type);
  EXPECT_THAT(wire.shape(), ::testing::ElementsAre(2, 3, 5));
  EXPECT_EQ(wire.data().size(), 30u * c.item_size);
  EXPECT_FALSE(wire.has_chunk());

  absl::StatusOr<at::Tensor> decoded = DecodeTensor(wire);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->scalar_type(), c.torch_type);
  EXPECT_EQ(decoded->sizes(), original.sizes());
  EXPECT_TRUE(torch::equal(*decoded, original));
}

TEST_P(CodecRoundTrip, TakingThePayloadKeepsTheValues) {
  const DTypeCase& c = GetParam();
  at::Tensor original = Sample(c.torch_type, {4, 3, 5});
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(original, &wire).ok());
  const void* payload = wire.data().data();
  absl::StatusOr<at::Tensor> decoded = DecodeTensor(std::move(wire));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  // The received bytes became the tensor's storage: nothing was copied.
  EXPECT_EQ(decoded->data_ptr(), payload);
  EXPECT_TRUE(wire.data().empty());
  EXPECT_EQ(decoded->scalar_type(), c.torch_type);
  EXPECT_TRUE(torch::equal(*decoded, original));
}

TEST_P(CodecRoundTrip, ChunkedEncodingEqualsEncodeThenSplit) {
  const DTypeCase& c = GetParam();
  at::Tensor original = Sample(c.torch_type, {7, 3, 5}).transpose(0, 2);
  petra::v1::Tensor whole;
  ASSERT_TRUE(EncodeTensor(original, &whole).ok());
  for (uint64_t chunk : {uint64_t{16}, uint64_t{100}, uint64_t{1} << 20}) {
    absl::StatusOr<std::vector<petra::v1::Tensor>> parts =
        EncodeTensorChunks(original, chunk);
    ASSERT_TRUE(parts.ok()) << parts.status();
    std::vector<petra::v1::Tensor> expected = SplitTensor(whole, chunk);
    ASSERT_EQ(parts->size(), expected.size()) << "chunk " << chunk;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ((*parts)[i].SerializeAsString(),
                expected[i].SerializeAsString())
          << "chunk " << chunk << ", part " << i;
    }
  }
}

TEST(TensorCodec, TakingThePayloadStillValidatesFirst) {
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(torch::ones({2, 3}), &wire).ok());
  wire.mutable_data()->pop_back();
  absl::StatusOr<at::Tensor> decoded =
      DecodeTensor(std::move(wire), {}, "gradient.first");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("gradient.first"));
}

TEST_P(CodecRoundTrip, NonContiguousTensor) {
  const DTypeCase& c = GetParam();
  at::Tensor base = Sample(c.torch_type, {4, 6});
  at::Tensor transposed = base.t();  // strides (1, 6): not contiguous
  ASSERT_FALSE(transposed.is_contiguous());
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(transposed, &wire).ok());
  EXPECT_THAT(wire.shape(), ::testing::ElementsAre(6, 4));
  absl::StatusOr<at::Tensor> decoded = DecodeTensor(wire);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(torch::equal(*decoded, transposed));
}

TEST_P(CodecRoundTrip, EmptyTensor) {
  const DTypeCase& c = GetParam();
  at::Tensor empty =
      torch::empty({3, 0, 2}, torch::TensorOptions().dtype(c.torch_type));
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(empty, &wire).ok());
  EXPECT_TRUE(wire.data().empty());
  absl::StatusOr<at::Tensor> decoded = DecodeTensor(wire);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->sizes(), empty.sizes());
  EXPECT_EQ(decoded->scalar_type(), c.torch_type);
}

TEST_P(CodecRoundTrip, Scalar) {
  const DTypeCase& c = GetParam();
  at::Tensor scalar = torch::tensor(42).to(c.torch_type);
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(scalar, &wire).ok());
  EXPECT_EQ(wire.shape_size(), 0);
  EXPECT_EQ(wire.data().size(), static_cast<size_t>(c.item_size));
  absl::StatusOr<at::Tensor> decoded = DecodeTensor(wire);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->dim(), 0);
  EXPECT_TRUE(torch::equal(*decoded, scalar));
}

INSTANTIATE_TEST_SUITE_P(
    AllWireDtypes, CodecRoundTrip,
    ::testing::Values(DTypeCase{torch::kFloat32, petra::v1::DTYPE_FLOAT32, 4},
                      DTypeCase{torch::kFloat16, petra::v1::DTYPE_FLOAT16, 2},
                      DTypeCase{torch::kBFloat16, petra::v1::DTYPE_BFLOAT16, 2},
                      DTypeCase{torch::kFloat64, petra::v1::DTYPE_FLOAT64, 8},
                      DTypeCase{torch::kInt64, petra::v1::DTYPE_INT64, 8},
                      DTypeCase{torch::kInt32, petra::v1::DTYPE_INT32, 4},
                      DTypeCase{torch::kUInt8, petra::v1::DTYPE_UINT8, 1}),
    [](const auto& info) {
      return std::string(c10::toString(info.param.torch_type));
    });

TEST(TensorCodec, ViewSendsOnlyItsOwnBytes) {
  at::Tensor big = torch::arange(1000, torch::kFloat32).reshape({100, 10});
  at::Tensor rows = big.narrow(0, 40, 3);  // contiguous view into big
  ASSERT_TRUE(rows.is_contiguous());
  ASSERT_EQ(rows.storage().nbytes(), 4000u);  // the storage is all of big
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(rows, &wire).ok());
  EXPECT_EQ(wire.data().size(), 3u * 10u * 4u);
  absl::StatusOr<at::Tensor> decoded = DecodeTensor(wire);
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(torch::equal(*decoded, rows));
  EXPECT_EQ(decoded->index({0, 0}).item<float>(), 400.0f);

  // A strided view (every other column) also sends only its elements.
  at::Tensor cols = big.slice(1, 0, 10, 2);
  ASSERT_FALSE(cols.is_contiguous());
  ASSERT_TRUE(EncodeTensor(cols, &wire).ok());
  EXPECT_EQ(wire.data().size(), 100u * 5u * 4u);
  decoded = DecodeTensor(wire);
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(torch::equal(*decoded, cols));
}

TEST(TensorCodec, EncodeReplacesPreviousContents) {
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(torch::ones({4, 4}), &wire).ok());
  ASSERT_TRUE(EncodeTensor(torch::ones({2}), &wire).ok());
  EXPECT_THAT(wire.shape(), ::testing::ElementsAre(2));
  EXPECT_EQ(wire.data().size(), 8u);
}

TEST(TensorCodec, RefusesDtypesWithoutWireEncoding) {
  petra::v1::Tensor wire;
  absl::Status s = EncodeTensor(torch::ones({2}, torch::kBool), &wire);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Bool"));
  s = EncodeTensor(at::Tensor(), &wire);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

// Every malformed tensor is refused with a message naming the field, before
// anything is allocated.
struct MalformedCase {
  std::string name;
  std::function<void(petra::v1::Tensor*)> corrupt;
  std::string expected_field;
  std::string expected_text;
};

// Test names carry the case name; print only that, not the bytes.
void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }

class MalformedTensor : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedTensor, IsRefusedNamingTheField) {
  petra::v1::Tensor wire;
  ASSERT_TRUE(EncodeTensor(torch::ones({2, 3}), &wire).ok());
  GetParam().corrupt(&wire);
  TensorLimits limits;
  limits.max_bytes = 1 << 20;
  absl::StatusOr<at::Tensor> decoded =
      DecodeTensor(wire, limits, "activation.first");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(decoded.status().message());
  EXPECT_THAT(message,
              HasSubstr("activation.first." + GetParam().expected_field));
  EXPECT_THAT(message, HasSubstr(GetParam().expected_text));
}

INSTANTIATE_TEST_SUITE_P(
    AllCases, MalformedTensor,
    ::testing::Values(
        MalformedCase{"UnspecifiedDtype",
                      [](petra::v1::Tensor* t) {
                        t->set_dtype(petra::v1::DTYPE_UNSPECIFIED);
                      },
                      "dtype", "not set"},
        MalformedCase{"UnknownDtype",
                      [](petra::v1::Tensor* t) {
                        t->set_dtype(static_cast<petra::v1::DType>(99));
                      },
                      "dtype", "unknown value 99"},
        MalformedCase{"RankOverEight",
                      [](petra::v1::Tensor* t) {
                        t->clear_shape();
                        for (int i = 0; i < 9; ++i) t->add_shape(1);
                        t->set_data(std::string(4, '\0'));
                      },
                      "shape", "rank 9 exceeds the maximum of 8"},
        MalformedCase{"NegativeDimension",
                      [](petra::v1::Tensor* t) { t->set_shape(1, -3); },
                      "shape[1]", "dimension -3 is negative"},
        MalformedCase{
            "TooFewBytes",
            [](petra::v1::Tensor* t) { t->mutable_data()->resize(20); }, "data",
            "20 bytes, but shape [2, 3] of float32 needs 24"},
        MalformedCase{
            "TooManyBytes",
            [](petra::v1::Tensor* t) { t->mutable_data()->append("x"); },
            "data", "25 bytes"},
        MalformedCase{"OverTheByteCap",
                      [](petra::v1::Tensor* t) {
                        t->clear_shape();
                        t->add_shape(1 << 20);  // 4 MiB of float32 > 1 MiB cap
                      },
                      "shape", "over the limit of 1048576 bytes"},
        MalformedCase{"ShapeOverflowsSixtyFourBits",
                      [](petra::v1::Tensor* t) {
                        t->clear_shape();
                        t->add_shape(int64_t{1} << 40);
                        t->add_shape(int64_t{1} << 40);
                      },
                      "shape", "overflows 64 bits"},
        MalformedCase{"UnassembledChunk",
                      [](petra::v1::Tensor* t) {
                        t->mutable_chunk()->set_total_bytes(24);
                      },
                      "chunk", "assembled"}),
    [](const auto& info) { return info.param.name; });

TEST(TensorCodec, HugeShapeIsRefusedBeforeAllocation) {
  // 2^60 bytes would abort any allocator; the decoder must refuse it from the
  // header alone, even with the default cap.
  petra::v1::Tensor wire;
  wire.set_dtype(petra::v1::DTYPE_FLOAT32);
  wire.add_shape(int64_t{1} << 58);
  absl::StatusOr<at::Tensor> decoded = DecodeTensor(wire);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("over the limit"));
}

// Found by tests/fuzz: an empty tensor (a zero dimension) whose other
// dimensions multiply past 64 bits passed validation as 0 bytes, then
// torch::empty failed on it (RESOURCE_EXHAUSTED). It is a bad shape.
TEST(TensorCodec, AZeroDimensionBesideHugeOnesIsABadShape) {
  petra::v1::Tensor wire;
  wire.set_dtype(petra::v1::DTYPE_UINT8);
  for (int64_t d :
       {int64_t{4}, int64_t{74}, int64_t{4}, int64_t{74},
        int64_t{360287970189639679}, int64_t{7}, int64_t{0}, int64_t{7}}) {
    wire.add_shape(d);
  }
  absl::StatusOr<at::Tensor> decoded = DecodeTensor(wire, {}, "labels");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("labels.shape"));
  // An ordinary empty tensor still decodes.
  wire.clear_shape();
  wire.add_shape(0);
  wire.add_shape(28);
  decoded = DecodeTensor(wire);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->numel(), 0);
}

}  // namespace
}  // namespace petra::wire
