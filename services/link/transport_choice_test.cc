#include "services/link/transport_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "services/link/endpoint.h"
#include "services/link/shared_ring.h"

namespace petra::link {
namespace {

using ::petra::v1::LinkEndpoint;
using ::testing::HasSubstr;

LinkEndpoint End(const std::string& host, const std::string& shm,
                 bool bulk = false) {
  LinkEndpoint e;
  e.set_host_id(host);
  e.set_shm_domain(shm);
  e.add_transports(petra::v1::TRANSPORT_GRPC);
  if (!shm.empty()) e.add_transports(petra::v1::TRANSPORT_SHM);
  if (bulk) e.add_transports(petra::v1::TRANSPORT_GRPC_BULK);
  return e;
}

TEST(TransportChoice, AutoSharesMemoryOnlyWhereBothEndsSeeTheSameShm) {
  const auto a = End("boot-1", "boot-1:30:1");
  EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_AUTO, a, a, "l"),
            petra::v1::TRANSPORT_SHM);
  EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_UNSPECIFIED, a, a, "l"),
            petra::v1::TRANSPORT_SHM);
  for (const LinkEndpoint& b :
       {End("boot-2", "boot-2:30:1"), End("boot-1", "boot-1:31:7"),
        End("boot-1", ""), LinkEndpoint()}) {
    EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_AUTO, a, b, "l"),
              petra::v1::TRANSPORT_GRPC)
        << b.DebugString();
  }
}

TEST(TransportChoice, AForcedTransportThatALinkLacksNamesTheLinkAndWhy) {
  const auto a = End("boot-1", "boot-1:30:1");
  auto other_host =
      ChooseTransport(petra::v1::TRANSPORT_SHM, a, End("boot-2", "boot-2:30:1"),
                      "stage 0 -> stage 1");
  EXPECT_EQ(other_host.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other_host.status().message(),
              HasSubstr("stage 0 -> stage 1 cannot share memory: the two "
                        "ends run on different hosts"));
  auto other_shm = ChooseTransport(petra::v1::TRANSPORT_SHM, a,
                                   End("boot-1", "boot-1:31:7"), "x");
  EXPECT_THAT(other_shm.status().message(), HasSubstr("different /dev/shm"));
  auto none =
      ChooseTransport(petra::v1::TRANSPORT_SHM, End("boot-1", ""), a, "x");
  EXPECT_THAT(none.status().message(),
              HasSubstr("the sender has no usable /dev/shm"));
  EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_GRPC, a, a, "x"),
            petra::v1::TRANSPORT_GRPC);
  auto ipc = ChooseTransport(petra::v1::TRANSPORT_CUDA_IPC, a, a, "x");
  EXPECT_EQ(ipc.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ipc.status().message(), HasSubstr("does not offer it"));
}

// An end of a CUDA build on host boot-1 that sees GPUs `uuids` (the first
// one peers with the second when `peers`) and runs on `device`.
LinkEndpoint GpuEnd(const std::string& device,
                    std::vector<std::string> uuids = {"gpu-a", "gpu-b"},
                    bool peers = false) {
  LinkEndpoint e = End("boot-1", "boot-1:30:1", true);
  e.add_transports(petra::v1::TRANSPORT_CUDA_IPC);
  for (const std::string& u : uuids) e.add_gpus()->set_uuid(u);
  if (peers) e.mutable_gpus(0)->add_peers(uuids[1]);
  e.set_device(device);
  return e;
}

TEST(TransportChoice, CudaIpcWhereBothEndsRunOnGpusThatMapEachOther) {
  const auto auto_ = petra::v1::TRANSPORT_AUTO;
  const auto ipc = petra::v1::TRANSPORT_CUDA_IPC;
  // One GPU, seen by both under the same or another index.
  EXPECT_EQ(*ChooseTransport(auto_, GpuEnd("cuda:0"), GpuEnd("cuda"), "l"),
            ipc);
  EXPECT_EQ(
      *ChooseTransport(ipc, GpuEnd("cuda:1"), GpuEnd("cuda:0", {"gpu-b"}), "l"),
      ipc);
  // Two GPUs: only with peer access.
  EXPECT_EQ(*ChooseTransport(auto_, GpuEnd("cuda:0", {"gpu-a", "gpu-b"}, true),
                             GpuEnd("cuda:1"), "l"),
            ipc);
  EXPECT_EQ(*ChooseTransport(auto_, GpuEnd("cuda:0"), GpuEnd("cuda:1"), "l"),
            petra::v1::TRANSPORT_SHM);
  auto no_peer = ChooseTransport(ipc, GpuEnd("cuda:0"), GpuEnd("cuda:1"),
                                 "stage 0 <-> stage 1");
  EXPECT_EQ(no_peer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_peer.status().message(),
              HasSubstr("stage 0 <-> stage 1: the GPUs (cuda:0 and cuda:1) "
                        "cannot map each other's memory"));
  // A stage on the CPU, a GPU the end does not see, another host, a build
  // without CUDA: each says why, and auto goes on to shm or gRPC.
  auto cpu = ChooseTransport(ipc, GpuEnd("cuda:0"), GpuEnd("cpu"), "l");
  EXPECT_THAT(cpu.status().message(),
              HasSubstr("the receiver runs on cpu, not on a GPU"));
  EXPECT_EQ(*ChooseTransport(auto_, GpuEnd("cuda:0"), GpuEnd("cpu"), "l"),
            petra::v1::TRANSPORT_SHM);
  EXPECT_THAT(ChooseTransport(ipc, GpuEnd("cuda:3"), GpuEnd("cuda:0"), "l")
                  .status()
                  .message(),
              HasSubstr("the sender does not see cuda:3"));
  LinkEndpoint elsewhere = GpuEnd("cuda:0");
  elsewhere.set_host_id("boot-2");
  elsewhere.set_shm_domain("boot-2:30:1");
  EXPECT_THAT(
      ChooseTransport(ipc, GpuEnd("cuda:0"), elsewhere, "l").status().message(),
      HasSubstr("different hosts"));
  EXPECT_EQ(*ChooseTransport(auto_, GpuEnd("cuda:0"), elsewhere, "l"),
            petra::v1::TRANSPORT_GRPC_BULK);
  EXPECT_THAT(
      ChooseTransport(ipc, End("boot-1", "boot-1:30:1"), GpuEnd("cuda:0"), "l")
          .status()
          .message(),
      HasSubstr("the sender does not offer it"));
}

TEST(TransportChoice, TheFeedUsesSharedMemoryWhenTheJobAsksForCudaIpc) {
  LinkEndpoint coordinator = GpuEnd("cpu");
  EXPECT_EQ(*ChooseFeedTransport(petra::v1::TRANSPORT_CUDA_IPC, coordinator,
                                 GpuEnd("cuda:0"), "l"),
            petra::v1::TRANSPORT_SHM);
}

TEST(TransportChoice, AutoUsesTheBulkChannelWhereMemoryCannotBeShared) {
  const auto a = End("boot-1", "boot-1:30:1", true);
  const auto b = End("boot-2", "boot-2:30:1", true);
  // One host: shared memory still wins.
  EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_AUTO, a, a, "l"),
            petra::v1::TRANSPORT_SHM);
  EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_AUTO, a, b, "l"),
            petra::v1::TRANSPORT_GRPC_BULK);
  EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_GRPC_BULK, a, a, "l"),
            petra::v1::TRANSPORT_GRPC_BULK);
  // Either end without it: auto falls back to the messages, forcing fails.
  const auto old = End("boot-2", "boot-2:30:1", false);
  EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_AUTO, a, old, "l"),
            petra::v1::TRANSPORT_GRPC);
  EXPECT_EQ(*ChooseTransport(petra::v1::TRANSPORT_AUTO, old, a, "l"),
            petra::v1::TRANSPORT_GRPC);
  auto forced = ChooseTransport(petra::v1::TRANSPORT_GRPC_BULK, a, old,
                                "stage 0 -> stage 1");
  EXPECT_EQ(forced.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(forced.status().message(),
              HasSubstr("stage 0 -> stage 1: the receiver does not offer it"));
  EXPECT_EQ(TransportName(petra::v1::TRANSPORT_GRPC_BULK), "grpc_bulk");
}

TEST(TransportChoice, TheFeedSharesMemoryOrUsesItsMessagesNeverTheBulkChannel) {
  const auto coordinator = End("boot-1", "boot-1:30:1", true);
  const auto near = End("boot-1", "boot-1:30:1", true);
  const auto far = End("boot-2", "boot-2:30:1", true);
  for (auto wanted : {petra::v1::TRANSPORT_AUTO, petra::v1::TRANSPORT_GRPC,
                      petra::v1::TRANSPORT_GRPC_BULK}) {
    EXPECT_EQ(*ChooseFeedTransport(wanted, coordinator, far, "f"),
              petra::v1::TRANSPORT_GRPC)
        << wanted;
  }
  EXPECT_EQ(
      *ChooseFeedTransport(petra::v1::TRANSPORT_AUTO, coordinator, near, "f"),
      petra::v1::TRANSPORT_SHM);
  EXPECT_EQ(ChooseFeedTransport(petra::v1::TRANSPORT_SHM, coordinator, far, "f")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(TransportChoice, ThisProcessOffersWhatItsHostHas) {
  const LinkEndpoint& e = LocalEndpoint();
  EXPECT_FALSE(e.host_id().empty());
  EXPECT_THAT(e.transports(), ::testing::Contains(petra::v1::TRANSPORT_GRPC));
  // The test machines have a /dev/shm: the probe ring was made and is gone.
  EXPECT_FALSE(e.shm_domain().empty());
  EXPECT_THAT(e.transports(), ::testing::Contains(petra::v1::TRANSPORT_SHM));
  EXPECT_THAT(e.transports(),
              ::testing::Contains(petra::v1::TRANSPORT_GRPC_BULK));
  EXPECT_EQ(CountRingNames(getpid()), 0);
  EXPECT_EQ(TransportName(petra::v1::TRANSPORT_SHM), "shm");
  EXPECT_EQ(TransportName(petra::v1::TRANSPORT_UNSPECIFIED), "auto");
}

}  // namespace
}  // namespace petra::link
