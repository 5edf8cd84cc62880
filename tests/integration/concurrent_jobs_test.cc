// Several jobs at once on one coordinator (issue 51): jobs run at the same
// time on disjoint stage servers when the free servers fit them, each
// training as it did alone; the queue starts the highest priority first;
// a user at --max-jobs-per-user waits while the servers stay free.
#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "services/wire/grpc_defaults.h"
#include "services/wire/transport_security.h"
#include "tests/integration/fleet_fixture.h"

namespace petra::testing {
namespace {

using google::protobuf::util::TimeUtil;

class ConcurrentJobs : public FleetProcesses {
 protected:
  std::set<std::string> Placed(const petra::v1::Job& job) {
    std::set<std::string> out;
    for (const auto& p : job.stages()) out.insert(p.address());
    return out;
  }
  // Whether the two jobs' runs overlapped in time.
  static bool Overlapped(const petra::v1::Job& a, const petra::v1::Job& b) {
    return a.start_time() < b.end_time() && b.start_time() < a.end_time();
  }
  void ExpectSameLosses(const std::string& solo, const std::string& id) {
    const auto want = Losses(solo);
    const auto got = Losses(id);
    ASSERT_FALSE(want.empty());
    ASSERT_EQ(want.size(), got.size()) << id;
    for (const auto& [key, loss] : want) {
      ASSERT_TRUE(got.count(key))
          << id << ": epoch " << key.first << " micro-batch " << key.second;
      EXPECT_NEAR(got.at(key), loss, 1e-5 * std::max(1.0, std::abs(loss)))
          << id << ": epoch " << key.first << " micro-batch " << key.second;
    }
  }
};

TEST_F(ConcurrentJobs, TwoJobsRunAtOnceOnDisjointServersEachAsAlone) {
  ASSERT_NO_FATAL_FAILURE(StartStages(4));
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(5));
  const std::vector<std::string> a = SmallJob(2);
  std::vector<std::string> b = SmallJob(2);
  ASSERT_EQ(b[10], "--seed");
  b[11] = "4";
  // Each alone first.
  const std::string solo_a = Submit(a);
  ASSERT_EQ(WaitForTheEnd(solo_a, std::chrono::seconds(180)).state(),
            petra::v1::JOB_STATE_SUCCEEDED);
  const std::string solo_b = Submit(b);
  ASSERT_EQ(WaitForTheEnd(solo_b, std::chrono::seconds(180)).state(),
            petra::v1::JOB_STATE_SUCCEEDED);

  // Then both at once: four servers fit two 2-stage jobs.
  const std::string id_a = Submit(a);
  const std::string id_b = Submit(b);
  const petra::v1::Job done_a = WaitForTheEnd(id_a, std::chrono::seconds(180));
  const petra::v1::Job done_b = WaitForTheEnd(id_b, std::chrono::seconds(180));
  ASSERT_EQ(done_a.state(), petra::v1::JOB_STATE_SUCCEEDED)
      << done_a.DebugString();
  ASSERT_EQ(done_b.state(), petra::v1::JOB_STATE_SUCCEEDED)
      << done_b.DebugString();
  EXPECT_TRUE(Overlapped(done_a, done_b))
      << TimeUtil::ToString(done_a.start_time()) << " - "
      << TimeUtil::ToString(done_a.end_time()) << " and "
      << TimeUtil::ToString(done_b.start_time()) << " - "
      << TimeUtil::ToString(done_b.end_time());
  std::set<std::string> both = Placed(done_a);
  for (const std::string& s : Placed(done_b)) {
    EXPECT_TRUE(both.insert(s).second) << s << " placed in both jobs";
  }
  EXPECT_EQ(both.size(), 4u);
  ExpectSameLosses(solo_a, id_a);
  ExpectSameLosses(solo_b, id_b);
  ExpectNoRingsLeft();
}

TEST_F(ConcurrentJobs, TheHighestPriorityStartsFirstAndEachPriorityInOrder) {
  ASSERT_NO_FATAL_FAILURE(StartStages(2));
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(5));
  // The fleet is busy with the first; then three wait.
  const std::string busy = Submit(SmallJob(2));
  WaitForState(busy, petra::v1::JOB_STATE_RUNNING, std::chrono::seconds(60));
  std::vector<std::string> low = SmallJob(1), high = SmallJob(1);
  low.insert(low.end(), {"--priority", "-1"});
  high.insert(high.end(), {"--priority", "5"});
  const std::string first_low = Submit(low);
  const std::string plain = Submit(SmallJob(1));
  const std::string urgent = Submit(high);
  std::vector<petra::v1::Job> ended;
  for (const std::string& id : {busy, first_low, plain, urgent}) {
    ended.push_back(WaitForTheEnd(id, std::chrono::seconds(240)));
    ASSERT_EQ(ended.back().state(), petra::v1::JOB_STATE_SUCCEEDED) << id;
  }
  // One after another on the two servers: the urgent one, then the
  // default one, then the low one.
  EXPECT_LE(ended[0].end_time(), ended[3].start_time());
  EXPECT_LE(ended[3].end_time(), ended[2].start_time());
  EXPECT_LE(ended[2].end_time(), ended[1].start_time());
  EXPECT_EQ(ended[3].spec().priority(), 5);
}

TEST_F(ConcurrentJobs, AUserAtTheLimitWaitsWhileServersAreFree) {
  const std::string token_file = dir_.path() + "/token";
  std::ofstream(token_file) << "admin-token-0123456789\n";
  ASSERT_NO_FATAL_FAILURE(StartStages(4));
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(
      5, {"--auth-token-file", token_file, "--max-jobs-per-user", "1",
          "--max-servers-per-user", "3"}));
  auto submit = [&](std::vector<std::string> job) {
    job.insert(job.begin(), {"submit", "--auth-token-file", token_file});
    RunResult r = Petra(job);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.find('\n'));
  };
  const std::string first = submit(SmallJob(2));
  const std::string second = submit(SmallJob(1));
  // More servers than a user may hold: refused at once, saying why.
  std::vector<std::string> wide = SmallJob(1);
  wide[7] = "4";
  wide.insert(wide.begin(), {"submit", "--auth-token-file", token_file});
  RunResult refused = Petra(wide);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("a user may hold at most 3"));

  auto get = [&](const std::string& id) {
    auto stub = petra::v1::CoordinatorService::NewStub(wire::CreateChannel(
        address_, wire::TransportSecurity(), "admin-token-0123456789"));
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    petra::v1::GetJobRequest r;
    r.set_job_id(id);
    petra::v1::Job job;
    EXPECT_TRUE(stub->GetJob(&c, r, &job).ok());
    return job;
  };
  petra::v1::Job a, b;
  const auto end = Clock::now() + std::chrono::seconds(240);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    a = get(first);
    b = get(second);
  } while (Clock::now() < end && (a.state() < petra::v1::JOB_STATE_SUCCEEDED ||
                                  b.state() < petra::v1::JOB_STATE_SUCCEEDED));
  ASSERT_EQ(a.state(), petra::v1::JOB_STATE_SUCCEEDED) << a.DebugString();
  ASSERT_EQ(b.state(), petra::v1::JOB_STATE_SUCCEEDED) << b.DebugString();
  // Two servers stayed free, but the user's second job waited its turn.
  EXPECT_FALSE(Overlapped(a, b));
  EXPECT_LE(a.end_time(), b.start_time());
}

}  // namespace
}  // namespace petra::testing
