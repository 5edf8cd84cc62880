#include "services/wire/grpc_defaults.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

namespace petra::wire {
namespace {

using ::testing::HasSubstr;

TEST(ValidateAddress, AcceptsHostPortForms) {
  EXPECT_TRUE(ValidateAddress("127.0.0.1:50051", "--listen", false).ok());
  EXPECT_TRUE(ValidateAddress("[::1]:50051", "--listen", false).ok());
  EXPECT_TRUE(
      ValidateAddress("petra-stage-0.petra-stage:50051", "--stages", false)
          .ok());
  EXPECT_TRUE(ValidateAddress("0.0.0.0:0", "--listen", true).ok());
}

TEST(ValidateAddress, RefusesMalformedNamingTheFlag) {
  for (const char* bad : {"50051", ":50051", "host:", "host:port", "host:70000",
                          "::1:50051", "[::1:50051", "host:-1"}) {
    absl::Status s = ValidateAddress(bad, "--listen", true);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--listen")) << bad;
  }
  EXPECT_FALSE(ValidateAddress("127.0.0.1:0", "--stages", false).ok());
}

TEST(GrpcDefaults, ClientLimitsAreRaised) {
  grpc::ChannelArguments args = ClientChannelArguments();
  grpc_channel_args c = args.c_channel_args();
  int found = 0;
  for (size_t i = 0; i < c.num_args; ++i) {
    std::string key = c.args[i].key;
    if (key == GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH ||
        key == GRPC_ARG_MAX_SEND_MESSAGE_LENGTH) {
      EXPECT_EQ(c.args[i].value.integer, kMaxMessageBytes);
      ++found;
    }
    if (key == GRPC_ARG_KEEPALIVE_TIME_MS) {
      EXPECT_EQ(c.args[i].value.integer, kKeepaliveTimeMs);
      ++found;
    }
  }
  EXPECT_EQ(found, 3);
  // A chunk and its envelope must fit in one message.
  EXPECT_LT(kTensorChunkBytes + (1 << 20), kMaxMessageBytes);
}

}  // namespace
}  // namespace petra::wire
