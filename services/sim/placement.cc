#include "services/sim/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/base/byte_text.h"

namespace petra::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Exhaustive search over server orders up to this many servers.
constexpr int kExhaustiveServers = 8;
constexpr int kMaxBlocks = 4096;
// Dynamic-programming steps the exhaustive search may take (about a second).
constexpr double kMaxSearchSteps = 3e8;

// a beats b by more than rounding (anything finite beats infinity).
bool Better(double a, double b) {
  if (std::isinf(b)) return a < b;
  return a < b - 1e-9 * std::max(1.0, b);
}

// Everything the search asks many times, computed once.
class Search {
 public:
  explicit Search(const PlacementProblem& p)
      : p_(p),
        blocks_(static_cast<int>(p.block_costs.size())),
        stages_(p.stages),
        prefix_(blocks_ + 1, 0.0) {
    for (int b = 0; b < blocks_; ++b)
      prefix_[b + 1] = prefix_[b] + p.block_costs[b];
    const int64_t cells =
        static_cast<int64_t>(stages_) * blocks_ * (blocks_ + 1);
    if (cells <= 40'000'000) memo_.assign(cells, -1);
  }

  int blocks() const { return blocks_; }
  int stages() const { return stages_; }

  double Cost(int begin, int end) const {
    return prefix_[end] - prefix_[begin];
  }

  int64_t Bytes(int stage, int begin, int end) const {
    if (memo_.empty()) return p_.stage_bytes({begin, end}, stage, stages_);
    int64_t& m =
        memo_[(static_cast<int64_t>(stage) * blocks_ + begin) * (blocks_ + 1) +
              end];
    if (m < 0)
      m = std::max<int64_t>(0, p_.stage_bytes({begin, end}, stage, stages_));
    return m;
  }

  bool Fits(int stage, int begin, int end, int server) const {
    const int64_t cap = p_.servers[server].memory_bytes;
    return cap <= 0 || Bytes(stage, begin, end) <= cap;
  }

  bool SameHost(int a, int b) const {
    return p_.servers[a].host == p_.servers[b].host;
  }

  // The busier direction of the link across the cut before block `begin`
  // (the backward carries twice the activation), in cost units.
  double Link(int begin, int from, int to) const {
    if (p_.seconds_per_cost <= 0) return 0;
    const double bandwidth =
        SameHost(from, to) ? p_.same_host_bandwidth : p_.cross_host_bandwidth;
    return 2.0 * static_cast<double>(p_.cut_bytes[begin - 1]) / bandwidth /
           p_.seconds_per_cost;
  }

  int CrossHostLinks(const std::vector<int>& order) const {
    int n = 0;
    for (size_t j = 1; j < order.size(); ++j)
      n += SameHost(order[j - 1], order[j]) ? 0 : 1;
    return n;
  }

  // Stage j's all-reduce per micro-batch, in cost units, with its copies
  // on the servers at slots[r J + j] (0 without replicas or the data to
  // weigh it).
  double AllReduce(int j, const model::BlockRange& r,
                   const std::vector<int>& slots) const {
    const int R = p_.replicas;
    if (R < 2 || p_.seconds_per_cost <= 0 || p_.block_parameters.empty())
      return 0;
    double parameters = 0;
    for (int b = r.begin; b < r.end; ++b)
      parameters += static_cast<double>(p_.block_parameters[b]);
    const double bandwidth = RingOnOneHost(j, slots) ? p_.same_host_bandwidth
                                                     : p_.cross_host_bandwidth;
    return 2.0 * (R - 1) / R * 4.0 * parameters / bandwidth /
           static_cast<double>(p_.accumulation) / p_.seconds_per_cost;
  }

  bool RingOnOneHost(int j, const std::vector<int>& slots) const {
    for (int r = 1; r < p_.replicas; ++r) {
      if (!SameHost(slots[j], slots[r * stages_ + j])) return false;
    }
    return true;
  }

  // Every replica's stages and links, each stage with its all-reduce; -1
  // when a stage does not fit its server.
  double ReplicatedBottleneck(const std::vector<model::BlockRange>& ranges,
                              const std::vector<int>& slots) const {
    double worst = 0;
    for (int r = 0; r < p_.replicas; ++r) {
      const std::vector<int> order(slots.begin() + r * stages_,
                                   slots.begin() + (r + 1) * stages_);
      const double v = Bottleneck(ranges, order);
      if (v < 0) return -1;
      worst = std::max(worst, v);
    }
    for (int j = 0; j < stages_; ++j) {
      worst = std::max(worst, Cost(ranges[j].begin, ranges[j].end) +
                                  AllReduce(j, ranges[j], slots));
    }
    return worst;
  }

  int CrossHostRings(const std::vector<int>& slots) const {
    int n = 0;
    for (int j = 0; j < stages_; ++j) n += RingOnOneHost(j, slots) ? 0 : 1;
    return n;
  }

  double Bottleneck(const std::vector<model::BlockRange>& ranges,
                    const std::vector<int>& order) const {
    double worst = 0;
    for (int j = 0; j < stages_; ++j) {
      const model::BlockRange& r = ranges[j];
      if (!Fits(j, r.begin, r.end, order[j])) return -1;
      worst = std::max(worst, Cost(r.begin, r.end));
      if (j > 0) worst = std::max(worst, Link(r.begin, order[j - 1], order[j]));
    }
    return worst;
  }

  // The cut with the smallest bottleneck for a fixed server order, by
  // dynamic programming over (stages placed, blocks covered); respects
  // memory unless `ignore_memory`. Infinite when nothing fits.
  double BestCut(const std::vector<int>& order, bool ignore_memory,
                 std::vector<model::BlockRange>* ranges) const {
    const int n = blocks_, J = stages_;
    std::vector<std::vector<double>> best(J + 1,
                                          std::vector<double>(n + 1, kInf));
    std::vector<std::vector<int>> from(J + 1, std::vector<int>(n + 1, -1));
    best[0][0] = 0;
    for (int j = 0; j < J; ++j) {
      // Stage j takes [b, e): at least one block, leaving one per stage after.
      for (int b = j; b <= n - (J - j); ++b) {
        if (best[j][b] == kInf) continue;
        const double link = j > 0 ? Link(b, order[j - 1], order[j]) : 0;
        const double before = std::max(best[j][b], link);
        for (int e = b + 1; e <= n - (J - j - 1); ++e) {
          if (!ignore_memory && !Fits(j, b, e, order[j])) continue;
          const double v = std::max(before, Cost(b, e));
          if (Better(v, best[j + 1][e])) {
            best[j + 1][e] = v;
            from[j + 1][e] = b;
          }
        }
      }
    }
    if (best[J][n] == kInf) return kInf;
    ranges->assign(J, {});
    for (int j = J, e = n; j > 0; --j) {
      const int b = from[j][e];
      (*ranges)[j - 1] = {b, e};
      e = b;
    }
    return best[J][n];
  }

 private:
  const PlacementProblem& p_;
  const int blocks_;
  const int stages_;
  std::vector<double> prefix_;
  mutable std::vector<int64_t> memo_;
};

absl::Status Validate(const PlacementProblem& p) {
  const int blocks = static_cast<int>(p.block_costs.size());
  if (blocks < 1 || blocks > kMaxBlocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: ", blocks, " blocks: must be in [1, ", kMaxBlocks, "]"));
  }
  for (int b = 0; b < blocks; ++b) {
    if (!std::isfinite(p.block_costs[b]) || p.block_costs[b] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: block ", b, " costs ", p.block_costs[b],
                       ": must be a finite number >= 0"));
    }
  }
  if (static_cast<int>(p.cut_bytes.size()) != blocks - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: ", p.cut_bytes.size(), " cut sizes for ",
                     blocks, " blocks: give one per cut (", blocks - 1, ")"));
  }
  if (!p.stage_bytes) {
    return absl::InvalidArgumentError("placement: no stage memory estimate");
  }
  if (p.stages < 1 || p.stages > blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: ", p.stages, " stages for ", blocks,
                     " blocks: must be in [1, ", blocks, "]"));
  }
  if (p.replicas < 1 || p.replicas > 4096 || p.accumulation < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: ", p.replicas, " replicas stepping every ",
                     p.accumulation, " micro-batches: must be >= 1"));
  }
  if (!p.block_parameters.empty() &&
      static_cast<int>(p.block_parameters.size()) != blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: ", p.block_parameters.size(),
                     " parameter counts for ", blocks, " blocks"));
  }
  if (static_cast<int64_t>(p.servers.size()) <
      static_cast<int64_t>(p.stages) * p.replicas) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job needs ", p.stages * p.replicas, " stage servers",
        p.replicas > 1 ? absl::StrCat(" (", p.replicas, " replicas x ",
                                      p.stages, " stages)")
                       : "",
        " but only ", p.servers.size(), " are free"));
  }
  if (!(p.seconds_per_cost >= 0) || !std::isfinite(p.seconds_per_cost) ||
      !(p.same_host_bandwidth > 0) || !(p.cross_host_bandwidth > 0)) {
    return absl::InvalidArgumentError(
        "placement: seconds per cost must be >= 0 and bandwidths > 0");
  }
  for (const std::vector<model::BlockRange>* given :
       {&p.fixed_ranges, &p.preferred_ranges}) {
    if (given->empty()) continue;
    if (static_cast<int>(given->size()) != p.stages ||
        !model::CoversInOrder(*given, blocks)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement: the given ranges are not ", p.stages,
          " consecutive non-empty ranges covering ", blocks, " blocks"));
    }
  }
  return absl::OkStatus();
}

// The classes servers fall in for the search: same host, same memory.
std::vector<int> ServerClasses(const PlacementProblem& p) {
  std::map<std::pair<std::string, int64_t>, int> ids;
  std::vector<int> out;
  for (const PlacementServer& s : p.servers) {
    out.push_back(
        ids.emplace(std::make_pair(s.host, s.memory_bytes), ids.size())
            .first->second);
  }
  return out;
}

int64_t Capacity(const PlacementServer& s) {
  return s.memory_bytes > 0 ? s.memory_bytes
                            : std::numeric_limits<int64_t>::max();
}

// Server orders of `length` (the first `length` servers of each order
// added), each kept once: orders that only swap interchangeable servers
// (ServerClasses) are the same.
class DistinctOrders {
 public:
  DistinctOrders(const PlacementProblem& p, int length)
      : classes_(ServerClasses(p)), length_(length) {}

  void Add(std::vector<int> order) {
    order.resize(length_);
    std::vector<int> key;
    for (int s : order) key.push_back(classes_[s]);
    if (seen_.insert(key).second) orders_.push_back(std::move(order));
  }
  // Every `length`-permutation of the servers, in lexicographic order of
  // the listed positions.
  void AddEvery() {
    std::vector<int> perm(classes_.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      // Each prefix appears (K - length)! times in a row; keep the first.
      Add(perm);
      std::reverse(perm.begin() + length_, perm.end());
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  void Clear() {
    seen_.clear();
    orders_.clear();
  }
  std::vector<std::vector<int>>& orders() { return orders_; }

 private:
  const std::vector<int> classes_;
  const int length_;
  std::set<std::vector<int>> seen_;
  std::vector<std::vector<int>> orders_;
};

// The hosts in the order their first server is listed.
std::vector<std::string> HostsAsListed(const PlacementProblem& p) {
  std::vector<std::string> hosts;
  for (const PlacementServer& s : p.servers) {
    if (std::find(hosts.begin(), hosts.end(), s.host) == hosts.end())
      hosts.push_back(s.host);
  }
  return hosts;
}

// Every server, the hosts' together in `host_order`, the most memory first
// within a host when `by_memory`.
std::vector<int> HostGrouped(const PlacementProblem& p,
                             const std::vector<std::string>& host_order,
                             bool by_memory) {
  std::vector<int> order;
  for (const std::string& h : host_order) {
    std::vector<int> on;
    for (int i = 0; i < static_cast<int>(p.servers.size()); ++i)
      if (p.servers[i].host == h) on.push_back(i);
    if (by_memory) {
      std::stable_sort(on.begin(), on.end(), [&](int a, int b) {
        return Capacity(p.servers[a]) > Capacity(p.servers[b]);
      });
    }
    order.insert(order.end(), on.begin(), on.end());
  }
  return order;
}

// Server orders to try, the listed order first; orders that only swap
// interchangeable servers (ServerClasses) appear once.
std::vector<std::vector<int>> CandidateOrders(const PlacementProblem& p) {
  const int K = static_cast<int>(p.servers.size()), J = p.stages;
  DistinctOrders out(p, J);
  std::vector<int> listed(K);
  std::iota(listed.begin(), listed.end(), 0);
  if (K <= kExhaustiveServers) {
    out.AddEvery();
    const double blocks = static_cast<double>(p.block_costs.size());
    if (out.orders().size() * J * blocks * blocks <= kMaxSearchSteps) {
      return std::move(out.orders());
    }
    out.Clear();  // too many distinct orders to cut each: the heuristics
  }
  out.Add(listed);
  // Hosts together, in the order they first appear.
  const std::vector<std::string> hosts = HostsAsListed(p);
  out.Add(HostGrouped(p, hosts, false));
  // The front stages hold the most in flight: the most memory there.
  std::vector<std::string> by_total = hosts;
  std::map<std::string, double> total;
  for (const PlacementServer& s : p.servers)
    total[s.host] += static_cast<double>(Capacity(s));
  std::stable_sort(by_total.begin(), by_total.end(),
                   [&](const std::string& a, const std::string& b) {
                     return total[a] > total[b];
                   });
  out.Add(HostGrouped(p, by_total, true));
  std::vector<int> by_memory = listed;
  std::stable_sort(by_memory.begin(), by_memory.end(), [&](int a, int b) {
    return Capacity(p.servers[a]) > Capacity(p.servers[b]);
  });
  out.Add(by_memory);
  return std::move(out.orders());
}

std::string Blocks(const model::BlockRange& r) {
  return r.end - r.begin == 1
             ? absl::StrCat("block ", r.begin)
             : absl::StrCat("blocks ", r.begin, "-", r.end - 1);
}

// Why nothing fits, said for the cut balanced by cost alone (or the given
// one) on the servers with the most memory first.
absl::Status NothingFits(const PlacementProblem& p, const Search& search) {
  std::vector<int> order(p.servers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return Capacity(p.servers[a]) > Capacity(p.servers[b]);
  });
  order.resize(p.stages);
  std::vector<model::BlockRange> ranges =
      !p.fixed_ranges.empty() ? p.fixed_ranges : p.preferred_ranges;
  if (ranges.empty()) search.BestCut(order, /*ignore_memory=*/true, &ranges);
  int worst = 0;
  std::vector<int64_t> need(p.stages);
  for (int j = 0; j < p.stages; ++j) {
    need[j] = search.Bytes(j, ranges[j].begin, ranges[j].end);
    if (need[j] > need[worst]) worst = j;
  }
  const PlacementServer& largest = p.servers[order[0]];
  const std::string what = p.fixed_ranges.empty()
                               ? "with the blocks balanced by cost, "
                               : "with the job's partition, ";
  const std::string advice =
      "lower --micro-batch, use more stages (--stages), or add servers with "
      "more memory";
  if (need[worst] > Capacity(largest)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job fits no placement on these servers: ", what, "stage ", worst,
        " (", Blocks(ranges[worst]), ") needs about ", base::Bytes(need[worst]),
        p.stage_detail
            ? " (" + p.stage_detail(ranges[worst], worst, p.stages) + ")"
            : std::string(),
        " but the largest server, ", largest.name, ", has ",
        base::Bytes(largest.memory_bytes),
        largest.memory_source.empty() ? "" : " (" + largest.memory_source + ")",
        "; ", advice));
  }
  std::vector<std::string> needs, haves;
  for (int j = 0; j < p.stages; ++j) {
    needs.push_back(absl::StrCat("stage ", j, " (", Blocks(ranges[j]), ") ",
                                 base::Bytes(need[j])));
  }
  for (int i : order) {
    haves.push_back(p.servers[i].memory_bytes > 0
                        ? base::Bytes(p.servers[i].memory_bytes)
                        : std::string("unknown"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the job fits no placement on these servers: ", what, "the stages need ",
      absl::StrJoin(needs, ", "), " and the largest servers have ",
      absl::StrJoin(haves, ", "), "; ", advice));
}

}  // namespace

double PlacementBottleneck(const PlacementProblem& problem,
                           const std::vector<model::BlockRange>& ranges,
                           const std::vector<int>& servers) {
  const Search search(problem);
  return problem.replicas > 1 ? search.ReplicatedBottleneck(ranges, servers)
                              : search.Bottleneck(ranges, servers);
}

namespace {

// R copies of the pipeline: the cut for one copy (or the given one), then
// which server takes each copy's stages. Every assignment when the servers
// are few; else copies placed one after another (each on the servers the
// others left, neighbours together), copies of a stage side by side on a
// host, and the listed order.
absl::StatusOr<Placement> PlanReplicated(const PlacementProblem& p,
                                         const Search& search) {
  const int R = p.replicas, J = p.stages, slots = R * J;
  const int K = static_cast<int>(p.servers.size());
  PlacementProblem one = p;
  one.replicas = 1;
  std::vector<model::BlockRange> ranges = p.fixed_ranges;
  if (ranges.empty()) {
    absl::StatusOr<Placement> single = PlanPlacement(one);
    if (!single.ok()) return single.status();
    ranges = single->ranges;
  }
  one.fixed_ranges = ranges;
  one.preferred_ranges.clear();
  DistinctOrders candidates(p, slots);
  std::vector<int> listed(K);
  std::iota(listed.begin(), listed.end(), 0);
  if (K <= kExhaustiveServers) {
    candidates.AddEvery();
  } else {
    candidates.Add(listed);
    // Copies one after another, each on the servers left.
    std::vector<int> left = listed, greedy;
    bool placed = true;
    for (int r = 0; r < R && placed; ++r) {
      PlacementProblem rest = one;
      rest.servers.clear();
      for (int i : left) rest.servers.push_back(p.servers[i]);
      absl::StatusOr<Placement> copy = PlanPlacement(rest);
      placed = copy.ok();
      if (!placed) break;
      std::vector<int> taken;
      for (int i : copy->servers) taken.push_back(left[i]);
      for (int i : taken) {
        greedy.push_back(i);
        left.erase(std::find(left.begin(), left.end(), i));
      }
    }
    if (placed) candidates.Add(greedy);
    const std::vector<int> grouped = HostGrouped(p, HostsAsListed(p), true);
    candidates.Add(grouped);  // each copy's neighbours on one host
    std::vector<int> stage_major(slots);
    for (int j = 0; j < J; ++j) {
      for (int r = 0; r < R; ++r) stage_major[r * J + j] = grouped[j * R + r];
    }
    candidates.Add(stage_major);  // each stage's copies on one host
  }
  Placement best;
  best.bottleneck = kInf;
  int best_cross = 0;
  for (const std::vector<int>& c : candidates.orders()) {
    double v = search.ReplicatedBottleneck(ranges, c);
    if (v < 0) continue;
    int cross = search.CrossHostRings(c);
    for (int r = 0; r < R; ++r) {
      cross += search.CrossHostLinks(
          std::vector<int>(c.begin() + r * J, c.begin() + (r + 1) * J));
    }
    if (Better(v, best.bottleneck) ||
        (!Better(best.bottleneck, v) && cross < best_cross)) {
      best.servers = c;
      best.bottleneck = v;
      best_cross = cross;
    }
  }
  if (best.bottleneck == kInf) {
    // One copy fits no server set: say why, as for one pipeline.
    absl::StatusOr<Placement> single = PlanPlacement(one);
    if (!single.ok()) return single.status();
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job's ", R, " replicas of ", J, " stages fit no placement on ", K,
        " servers: one copy fits, but not ", R,
        " (each copy needs as much memory as one); add servers with more "
        "memory or lower --replicas"));
  }
  best.ranges = ranges;
  best.cross_host_rings = search.CrossHostRings(best.servers);
  for (int r = 0; r < R; ++r) {
    best.cross_host_links += search.CrossHostLinks(std::vector<int>(
        best.servers.begin() + r * J, best.servers.begin() + (r + 1) * J));
  }
  for (int j = 0; j < J; ++j) {
    best.stage_bytes.push_back(search.Bytes(j, ranges[j].begin, ranges[j].end));
  }
  return best;
}

}  // namespace

absl::StatusOr<Placement> PlanPlacement(const PlacementProblem& p) {
  if (absl::Status s = Validate(p); !s.ok()) return s;
  const Search search(p);
  if (p.replicas > 1) return PlanReplicated(p, search);
  Placement best;
  best.bottleneck = kInf;
  for (const std::vector<int>& order : CandidateOrders(p)) {
    std::vector<model::BlockRange> ranges;
    double v;
    if (!p.fixed_ranges.empty()) {
      ranges = p.fixed_ranges;
      v = search.Bottleneck(ranges, order);
      if (v < 0) v = kInf;
    } else {
      v = search.BestCut(order, /*ignore_memory=*/false, &ranges);
    }
    if (v == kInf) continue;
    const int cross = search.CrossHostLinks(order);
    if (Better(v, best.bottleneck) ||
        (!Better(best.bottleneck, v) && cross < best.cross_host_links)) {
      best.ranges = std::move(ranges);
      best.servers = order;
      best.bottleneck = v;
      best.cross_host_links = cross;
    }
  }
  if (best.bottleneck == kInf) return NothingFits(p, search);
  if (!p.preferred_ranges.empty() && p.fixed_ranges.empty()) {
    const double v = search.Bottleneck(p.preferred_ranges, best.servers);
    if (v >= 0 && !Better(best.bottleneck, v)) {
      best.ranges = p.preferred_ranges;
      best.bottleneck = v;
    }
  }
  for (int j = 0; j < p.stages; ++j) {
    best.stage_bytes.push_back(
        search.Bytes(j, best.ranges[j].begin, best.ranges[j].end));
  }
  return best;
}

}  // namespace petra::sim
