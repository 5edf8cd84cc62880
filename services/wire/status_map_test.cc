#include "services/wire/status_map.h"

#include <gtest/gtest.h>

namespace petra::wire {
namespace {

TEST(StatusMap, EveryCanonicalCodeKeepsItsNumberAndMessage) {
  for (int code = 1; code <= 16; ++code) {
    absl::Status s(static_cast<absl::StatusCode>(code), "why");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(g.error_message(), "why");
    EXPECT_EQ(FromGrpcStatus(g), s);
    EXPECT_EQ(FromProtoStatus(ToProtoStatus(s)), s);
  }
}

TEST(StatusMap, OkStaysOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_TRUE(FromProtoStatus(petra::v1::Status()).ok());
}

TEST(StatusMap, UnknownCodesBecomeUnknown) {
  petra::v1::Status p;
  p.set_code(999);
  p.set_message("odd");
  absl::Status s = FromProtoStatus(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(s.message(), "odd");
}

}  // namespace
}  // namespace petra::wire
