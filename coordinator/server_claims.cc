#include "coordinator/server_claims.h"

#include "absl/strings/str_cat.h"

namespace petra::coordinator {

int ServerClaims::FreeLocked(const std::vector<std::string>& fleet) const {
  int free = 0;
  for (const std::string& s : fleet) free += holder_.count(s) == 0 ? 1 : 0;
  for (const auto& [job, n] : reserved_) free -= n;
  return free;
}

bool ServerClaims::Reserve(const std::string& job, const std::string& owner,
                           int n, const std::vector<std::string>& fleet) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool idle = holder_.empty() && reserved_.empty();
  if (!idle && FreeLocked(fleet) < n) return false;
  reserved_[job] = n;
  owner_[job] = owner;
  return true;
}

absl::Status ServerClaims::Claim(const std::string& job,
                                 const std::vector<std::string>& servers) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& s : servers) {
    auto it = holder_.find(s);
    if (it != holder_.end() && it->second != job) {
      return absl::FailedPreconditionError(
          absl::StrCat("stage server ", s, " is held by job ", it->second));
    }
  }
  for (auto it = holder_.begin(); it != holder_.end();) {
    it = it->second == job ? holder_.erase(it) : std::next(it);
  }
  for (const std::string& s : servers) holder_[s] = job;
  reserved_.erase(job);
  return absl::OkStatus();
}

void ServerClaims::Release(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = holder_.begin(); it != holder_.end();) {
    it = it->second == job ? holder_.erase(it) : std::next(it);
  }
  reserved_.erase(job);
  owner_.erase(job);
}

std::set<std::string> ServerClaims::HeldByOthers(const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> out;
  for (const auto& [server, holder] : holder_) {
    if (holder != job) out.insert(server);
  }
  return out;
}

std::map<std::string, int> ServerClaims::ServersByJob() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int> out = reserved_;
  for (const auto& [server, job] : holder_) ++out[job];
  return out;
}

int ServerClaims::ServersOf(const std::string& owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto owns = [&](const std::string& job) {
    auto it = owner_.find(job);
    return it != owner_.end() && it->second == owner;
  };
  int n = 0;
  for (const auto& [job, count] : reserved_) n += owns(job) ? count : 0;
  for (const auto& [server, job] : holder_) n += owns(job) ? 1 : 0;
  return n;
}

int ServerClaims::JobsOf(const std::string& owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [job, o] : owner_) n += o == owner ? 1 : 0;
  return n;
}

}  // namespace petra::coordinator
