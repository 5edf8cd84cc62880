// Which job holds which stage servers, so that jobs run at once on
// disjoint servers. The scheduler reserves a count for a job it starts
// (the job has not chosen its servers yet); the job then claims the
// servers it chose, which ends the reservation, claims anew after a
// recovery re-places it, and lets go of all of them when it ends. Owners
// are kept for the per-user limits.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace petra::coordinator {

class ServerClaims {
 public:
  // Reserves `n` servers of `fleet` for `job` (of `owner`) when that many
  // are free: claimed by no job and not reserved for another. On an idle
  // fleet (nothing claimed or reserved) it always reserves, so that a job
  // larger than what answers starts and says why it cannot run, as it
  // would alone.
  bool Reserve(const std::string& job, const std::string& owner, int n,
               const std::vector<std::string>& fleet);
  // Makes `servers` the servers `job` holds (its reservation ends).
  // FAILED_PRECONDITION naming the server and its job when another job
  // holds one of them; nothing changes then.
  absl::Status Claim(const std::string& job,
                     const std::vector<std::string>& servers);
  // `job` holds nothing and reserves nothing any more.
  void Release(const std::string& job);

  // The servers jobs other than `job` hold.
  std::set<std::string> HeldByOthers(const std::string& job) const;
  // Servers held or reserved by `owner`'s jobs, and how many of its jobs
  // hold or reserve any.
  int ServersOf(const std::string& owner) const;
  int JobsOf(const std::string& owner) const;
  // Each job's servers (held, or reserved and not yet chosen: the count).
  std::map<std::string, int> ServersByJob() const;

 private:
  int FreeLocked(const std::vector<std::string>& fleet) const;

  mutable std::mutex mu_;
  std::map<std::string, std::string> holder_;  // server -> job
  std::map<std::string, int> reserved_;        // job -> servers to come
  std::map<std::string, std::string> owner_;   // job -> owner
};

}  // namespace petra::coordinator
