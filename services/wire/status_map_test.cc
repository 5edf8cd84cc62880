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

// A message that repeats a 1 MiB job id once broke the client's
// connection (its headers passed the client's 8 KiB): it is cut, at a
// character's start, saying how much.
TEST(StatusMap, LongMessagesAreCutSayingHowMuch) {
  const std::string id(1 << 20, 'x');
  const grpc::Status s =
      ToGrpcStatus(absl::NotFoundError("no job \"" + id + "\""));
  EXPECT_LT(s.error_message().size(), kMaxStatusMessageBytes + 64);
  EXPECT_NE(s.error_message().find(" more bytes)"), std::string::npos);
  EXPECT_EQ(s.error_message().rfind("no job \"xxx", 0), 0u);
  EXPECT_LT(ToProtoStatus(absl::InternalError(id)).message().size(),
            kMaxStatusMessageBytes + 64);
  // Two-byte characters are not cut in half.
  std::string accents;
  while (accents.size() < 3000) accents += "\xc3\xa9";
  const std::string cut =
      ToGrpcStatus(absl::UnknownError("x" + accents)).error_message();
  const size_t end = cut.find(" ... (");
  ASSERT_NE(end, std::string::npos);
  EXPECT_EQ(end % 2, 1u);  // "x" and whole two-byte characters
  // Short messages are untouched.
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("no job")).error_message(),
            "no job");
}

}  // namespace
}  // namespace petra::wire
