#include "services/engine/replica_group.h"

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

#if PETRA_WITH_GLOO
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace petra::engine {
#if PETRA_WITH_GLOO
namespace {

class GlooAverager : public GradientAverager {
 public:
  GlooAverager(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int rank,
               int size)
      : group_(std::move(group)), rank_(rank), size_(size) {}

  void Average(const std::vector<at::Tensor>& tensors) override {
    if (tensors.empty()) return;
    const auto start = std::chrono::steady_clock::now();
    torch::NoGradGuard no_grad;
    // One bucket: one collective a step, whatever the parameter count.
    std::vector<at::Tensor> flat;
    flat.reserve(tensors.size());
    for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
    std::vector<at::Tensor> bucket = {torch::cat(flat)};
    group_->allreduce(bucket)->wait();
    bucket[0].div_(size_);
    int64_t offset = 0;
    for (const at::Tensor& t : tensors) {
      const int64_t n = t.numel();
      t.copy_(bucket[0].narrow(0, offset, n).view_as(t));
      offset += n;
    }
    bytes_ += bucket[0].nbytes();
    seconds_ = seconds_ + std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count();
  }
  bool Agree(int64_t value) override {
    // The largest value and the largest negation (minus the smallest) in
    // one collective: every replica agrees when they meet.
    std::vector<at::Tensor> both = {
        torch::tensor({value, -value}, torch::kLong)};
    c10d::AllreduceOptions max;
    max.reduceOp = c10d::ReduceOp::MAX;
    group_->allreduce(both, max)->wait();
    return both[0][0].item<int64_t>() == -both[0][1].item<int64_t>();
  }
  int replicas() const override { return size_; }
  int rank() const override { return rank_; }
  double seconds() const override { return seconds_; }
  int64_t bytes() const override { return bytes_; }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  const int rank_, size_;
  std::atomic<double> seconds_{0};
  std::atomic<int64_t> bytes_{0};
};

// A rank of a group over `store`: Gloo on `host`'s loopback or network.
std::unique_ptr<GradientAverager> JoinOver(
    c10::intrusive_ptr<c10d::Store> store, int rank, int replicas,
    const std::string& host, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  options->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname(host));
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank,
                                                           replicas, options);
  return std::make_unique<GlooAverager>(std::move(group), rank, replicas);
}

class TcpReplicaStore : public ReplicaStore {
 public:
  explicit TcpReplicaStore(c10::intrusive_ptr<c10d::TCPStore> store)
      : store_(std::move(store)) {}
  int port() const override { return store_->getPort(); }

 private:
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ReplicaStore>> ReplicaStore::Start(
    const std::string& host, int port, std::chrono::milliseconds timeout) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica store: port ", port, " is not in 0..65535"));
  }
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(port);
    o.isServer = true;
    o.waitWorkers = false;
    o.timeout = timeout;
    return std::make_unique<TcpReplicaStore>(
        c10::make_intrusive<c10d::TCPStore>(host, o));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("replica store on ", host, ":", port, ": ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<GradientAverager>> JoinReplicaGroup(
    const std::string& store_host, int store_port, const std::string& group,
    int rank, int replicas, const std::string& local_host,
    std::chrono::milliseconds timeout) {
  if (rank < 0 || rank >= replicas || store_port <= 0 || store_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica group ", group, ": rank ", rank, " of ", replicas,
                     " at store port ", store_port));
  }
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(store_port);
    o.isServer = false;
    o.waitWorkers = false;
    o.timeout = timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(store_host, o);
    auto store = c10::make_intrusive<c10d::PrefixStore>(group, tcp);
    return JoinOver(store, rank, replicas, local_host, timeout);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("replica group ", group, ": rank ", rank, " of ", replicas,
                     " could not join through ", store_host, ":", store_port,
                     ": ", e.what()));
  }
}

absl::StatusOr<std::vector<std::unique_ptr<GradientAverager>>>
MakeLocalReplicaGroup(int replicas, std::chrono::milliseconds timeout) {
  if (replicas < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a replica group needs at least one rank, not ", replicas));
  }
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::unique_ptr<GradientAverager>> out(replicas);
  std::vector<std::string> errors(replicas);
  // Each rank's constructor waits for the others (the rendezvous): one
  // thread each.
  std::vector<std::thread> joining;
  for (int r = 0; r < replicas; ++r) {
    joining.emplace_back([&, r] {
      try {
        out[r] = JoinOver(store, r, replicas, "127.0.0.1", timeout);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : joining) t.join();
  for (int r = 0; r < replicas; ++r) {
    if (!errors[r].empty()) {
      return absl::UnavailableError(absl::StrCat(
          "replica group: rank ", r, " could not join: ", errors[r]));
    }
  }
  return out;
}

#else  // !PETRA_WITH_GLOO

namespace {
absl::Status NoGloo() {
  return absl::UnimplementedError(
      "replicas need torch's Gloo backend, and this build found no Gloo "
      "headers beside libtorch's (Debian: apt-get install libgloo-dev, then "
      "rebuild)");
}
}  // namespace

absl::StatusOr<std::unique_ptr<ReplicaStore>> ReplicaStore::Start(
    const std::string&, int, std::chrono::milliseconds) {
  return NoGloo();
}

absl::StatusOr<std::unique_ptr<GradientAverager>> JoinReplicaGroup(
    const std::string&, int, const std::string&, int, int, const std::string&,
    std::chrono::milliseconds) {
  return NoGloo();
}

absl::StatusOr<std::vector<std::unique_ptr<GradientAverager>>>
MakeLocalReplicaGroup(int, std::chrono::milliseconds) {
  return NoGloo();
}

#endif  // PETRA_WITH_GLOO
}  // namespace petra::engine
