// petra_bench_transport: how fast a stage's tensors cross between its device
// and the host, and from one stage's device to another's through each data
// channel (docs/DATA_PLANE.md): the copies to pinned host memory and back
// (device_transfer.h), and the whole path a micro-batch takes between two
// stage servers: device -> pinned host -> chunked messages (grpc) or a
// shared-memory slot and a small message (shm) -> a Forward stream on
// 127.0.0.1 -> assembled, decoded -> pinned host -> device. On a CPU there
// are no device copies: the transport rows are host to host.
#include <grpcpp/grpcpp.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "petra/v1/stage.grpc.pb.h"
#include "services/base/crash_report.h"
#include "services/base/flag_set.h"
#include "services/base/large_allocations.h"
#include "services/base/secret_key.h"
#include "services/engine/device_transfer.h"
#include "services/link/bulk_service.h"
#include "services/link/channel_factory.h"
#include "services/link/ipc_device.h"
#include "services/link/payload_link.h"
#include "services/link/transport_choice.h"
#include "services/model/device_check.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/stage_messages.h"
#include "services/wire/stream_sender.h"

namespace petra {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The receiving stage, reduced to its transport: every micro-batch is
// assembled, decoded and copied to the device (waiting for the copy), and
// a credit goes back. The sync API is enough for one stream.
class Receiver final : public petra::v1::StageService::Service {
 public:
  Receiver(const engine::DeviceTransfer& transfer, int window)
      : transfer_(transfer), window_(window) {}

  grpc::Status Forward(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<petra::v1::StreamReply,
                               petra::v1::ForwardMessage>* stream) override {
    petra::v1::StreamReply credit;
    credit.mutable_credit()->set_micro_batches(window_);
    stream->Write(credit);
    credit.mutable_credit()->set_micro_batches(1);
    std::unique_ptr<wire::PayloadFetcher> fetcher = link::MakeFetcher();
    wire::ForwardAssembler assembler({}, fetcher.get());
    petra::v1::ForwardMessage m;
    while (stream->Read(&m)) {
      absl::StatusOr<std::optional<model::ForwardBatch>> p =
          assembler.Add(std::move(m));
      if (!p.ok()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string(p.status().message()));
      }
      if (!p->has_value()) continue;
      absl::StatusOr<engine::Transfer> copied =
          transfer_.ToDevice(wire::TensorsOf(**p), (*p)->header.micro_batch_id);
      if (!copied.ok()) {
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            std::string(copied.status().message()));
      }
      copied->Wait();
      ++received_;
      stream->Write(credit);
    }
    return grpc::Status::OK;
  }

  int received() const { return received_; }

 private:
  const engine::DeviceTransfer& transfer_;
  const int window_;
  int received_ = 0;
};

struct Rate {
  double seconds = 0;  // median per tensor
  double gb_per_s = 0;
};

template <typename F>
Rate Median(int repeats, double bytes, F once) {
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const Clock::time_point start = Clock::now();
    once();
    t.push_back(Seconds(start));
  }
  std::sort(t.begin(), t.end());
  const double s = t[t.size() / 2];
  return {s, bytes / s / 1e9};
}

int Run(const std::string& device_name, double megabytes, int repeats,
        int window, const std::vector<petra::v1::Transport>& transports,
        int connections) {
  const c10::Device device(device_name);
  engine::DeviceTransfer sender_side(device, 0), receiver_side(device, 1);
  sender_side.UseComputeStreamOnThisThread();
  const int64_t elements = static_cast<int64_t>(megabytes * (1 << 20) / 4);
  const double bytes = static_cast<double>(elements) * 4;
  const torch::Tensor source = torch::randn({elements}, device);
  auto check = [](const absl::Status& s) {
    if (!s.ok()) {
      std::cerr << "transport bench: " << s.message() << "\n";
      std::exit(1);
    }
  };

  std::printf(
      "%g MiB float32 tensors on %s; copies: the median of %d; transport: "
      "%d tensors back to back, a credit window of %d, chunks of %d "
      "MiB.\n\n",
      megabytes, device_name.c_str(), repeats, repeats, window,
      wire::kTensorChunkBytes >> 20);
  std::printf("| path | per tensor | GB/s |\n|---|---:|---:|\n");
  auto row = [](const char* path, const Rate& r) {
    std::printf("| %s | %.2f ms | %.2f |\n", path, r.seconds * 1e3, r.gb_per_s);
  };
  if (sender_side.on_device()) {
    // Warm the allocators first: their first allocations are not copies.
    for (int i = 0; i < 2; ++i) {
      torch::Tensor t = source;
      auto out = sender_side.ToHost({&t}, i);
      check(out.status());
      out->Wait();
      auto in = sender_side.ToDevice({&t}, i);
      check(in.status());
      in->Wait();
    }
    const torch::Tensor host = source.cpu();
    row("device to pinned host (copy stream)", Median(repeats, bytes, [&] {
          torch::Tensor t = source;
          auto out = sender_side.ToHost({&t}, 0);
          check(out.status());
          out->Wait();
        }));
    row("device to pageable host (`.to(cpu)`)",
        Median(repeats, bytes, [&] { (void)source.to(torch::kCPU); }));
    row("host to device through pinned memory (copy stream)",
        Median(repeats, bytes, [&] {
          torch::Tensor t = host;
          auto in = sender_side.ToDevice({&t}, 0);
          check(in.status());
          in->Wait();
        }));
  }

  // Two stages' transport on loopback: device to device, through each
  // data channel beside the stream.
  Receiver receiver(receiver_side, window);
  const std::string key = base::NewSecretKey();
  link::BulkReceiver bulk(link::BulkReceiver::KeyIs(key));
  int port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      wire::StartServer("127.0.0.1:0", "--listen", {&receiver, &bulk}, &port);
  check(server.status());
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto channel = wire::CreateChannel(address);
  auto stub = petra::v1::StageService::NewStub(channel);
  for (petra::v1::Transport transport : transports) {
    if (transport == petra::v1::TRANSPORT_CUDA_IPC) {
      std::string why;
      if (!sender_side.on_device() || link::CudaIpcDevice(&why) == nullptr) {
        std::printf("| device to device through CUDA IPC (cuda_ipc) | %s | |\n",
                    sender_side.on_device() ? why.c_str()
                                            : "needs a GPU (--device cuda)");
        continue;
      }
    }
    double total = 0;
    for (int round = 0; round < 2; ++round) {  // the first warms the stream
      wire::StreamSender<petra::v1::ForwardMessage> sender(
          "the receiver", [&](grpc::ClientContext* c) {
            return std::unique_ptr<grpc::ClientReaderWriter<
                petra::v1::ForwardMessage, petra::v1::StreamReply>>(
                stub->Forward(c));
          });
      absl::StatusOr<std::unique_ptr<wire::PayloadPlacer>> placer =
          transport == petra::v1::TRANSPORT_GRPC_BULK
              ? std::make_unique<link::GrpcBulkPlacer>(
                    [&](int i) {
                      return wire::CreateBulkChannel(
                          address, wire::TransportSecurity(), i);
                    },
                    [&] { return sender.health(); }, key, connections)
              : link::MakePlacer(transport, [&] { return sender.health(); });
      check(placer.status());
      const link::ForwardLink link(
          [&](const auto& parts) { return sender.Send(parts); },
          std::move(*placer), wire::kTensorChunkBytes);
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < repeats; ++i) {
        model::ForwardBatch p;
        p.header.micro_batch_id = static_cast<uint64_t>(i);
        p.x.a = source;
        // cuda_ipc copies device to device: no stop on the host.
        auto out = link.keeps_device()
                       ? sender_side.Computed(i)
                       : sender_side.ToHost(wire::TensorsOf(p), i);
        check(out.status());
        out->Wait();
        check(link.Send(p).status());
      }
      check(sender.Close());
      total = Seconds(start);
    }
    const std::string path = absl::StrCat(
        sender_side.on_device() ? "device to device" : "host to host",
        transport == petra::v1::TRANSPORT_GRPC ? " over gRPC on loopback"
        : transport == petra::v1::TRANSPORT_GRPC_BULK
            ? absl::StrCat(" over the bulk gRPC channel (grpc_bulk, ",
                           connections,
                           connections == 1 ? " connection" : " connections",
                           ") on loopback")
        : transport == petra::v1::TRANSPORT_CUDA_IPC
            ? " through CUDA IPC (cuda_ipc) beside a gRPC stream"
            : " through shared memory (shm) beside a gRPC stream",
        sender_side.on_device() ? " (whole path)" : "");
    row(path.c_str(), {total / repeats, bytes * repeats / total / 1e9});
  }
  (*server)->Shutdown();
  std::printf(
      "\nEach transport row is a stream of %d tensors sent back to back "
      "(%d received in all), so up to %d are in flight: its rate is the "
      "pipeline's, not one tensor's latency. grpc carries the bytes in the "
      "messages; grpc_bulk sends them as raw byte buffers over the tensor's "
      "own memory, in frames of %d MiB dealt to its connections, and the "
      "receiver copies each frame once; shm copies them into a "
      "shared-memory slot and the receiver copies them out; cuda_ipc "
      "copies them device to device into a slot of exported device memory "
      "and the receiver copies them out on its GPU (docs/DATA_PLANE.md).\n",
      repeats, receiver.received(), window,
      static_cast<int>(link::kBulkFrameBytes >> 20));
  return 0;
}

}  // namespace
}  // namespace petra

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  petra::base::KeepLargeAllocationsInHeap();  // as every petra binary does
  std::string device = "cpu";
  std::string megabytes = "64";
  int64_t repeats = 20, window = 4;
  int64_t connections = petra::link::kBulkConnections;
  std::string transports = "grpc,grpc_bulk,shm,cuda_ipc";
  petra::base::FlagSet flags(
      "petra_bench_transport [flags]",
      "How fast tensors cross between a stage's device and the host, and\n"
      "between two stages through each data channel beside a gRPC stream on\n"
      "loopback (device to device). Prints a Markdown table.");
  flags.AddString("device", &device, "cpu, cuda or cuda:N");
  flags.AddString(
      "megabytes", &megabytes,
      "size of each tensor, in MiB; a comma-separated list measures "
      "each size in turn (\"16,64,256\")");
  flags.AddInt("repeats", &repeats, "tensors per measurement (median)");
  flags.AddInt("window", &window,
               "micro-batches the receiver lets the sender have in flight");
  flags.AddString("transports", &transports,
                  "data channels to measure, comma-separated: grpc, "
                  "grpc_bulk, shm, cuda_ipc (a GPU's)");
  flags.AddInt("connections", &connections,
               "connections of the grpc_bulk channel");
  if (int rc = petra::base::ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  if (absl::Status s = petra::model::CheckDeviceAvailable(device, "--device");
      !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  std::vector<double> sizes;
  for (absl::string_view m : absl::StrSplit(megabytes, ',')) {
    double v = 0;
    if (!absl::SimpleAtod(m, &v) || !(v > 0 && v <= 4096)) {
      std::cerr << "--megabytes: \"" << m
                << "\" is not a size in (0, 4096] MiB\n";
      return 2;
    }
    sizes.push_back(v);
  }
  if (repeats < 1 || window < 1 || connections < 1 || connections > 64) {
    std::cerr << "--repeats and --window must be >= 1, --connections in "
                 "[1, 64]\n";
    return 2;
  }
  std::vector<petra::v1::Transport> chosen;
  for (absl::string_view t : absl::StrSplit(transports, ',')) {
    if (t == "grpc") {
      chosen.push_back(petra::v1::TRANSPORT_GRPC);
    } else if (t == "shm") {
      chosen.push_back(petra::v1::TRANSPORT_SHM);
    } else if (t == "grpc_bulk") {
      chosen.push_back(petra::v1::TRANSPORT_GRPC_BULK);
    } else if (t == "cuda_ipc") {
      chosen.push_back(petra::v1::TRANSPORT_CUDA_IPC);
    } else {
      std::cerr << "--transports: \"" << t
                << "\" is not one of grpc, grpc_bulk, shm, cuda_ipc\n";
      return 2;
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) std::printf("\n");
    if (int rc = petra::Run(device, sizes[i], static_cast<int>(repeats),
                            static_cast<int>(window), chosen,
                            static_cast<int>(connections));
        rc != 0) {
      return rc;
    }
  }
  return 0;
}
