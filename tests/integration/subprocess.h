// Processes started by integration tests: bounded in time, always reaped.
// A child dies with the test (PR_SET_PDEATHSIG), so a crashed test leaves no
// server behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace petra::testing {

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal or the timeout
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs `path args...` to completion (killed after `timeout`).
RunResult RunToExit(const std::string& path,
                    const std::vector<std::string>& args,
                    std::chrono::seconds timeout = std::chrono::seconds(60));

// A long-running child whose stdout is read line by line.
class Subprocess {
 public:
  Subprocess(const std::string& path, const std::vector<std::string>& args);
  ~Subprocess();  // SIGTERM, then SIGKILL after 10 s; always reaped
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Reads stdout until a line contains `marker`; returns that line, or ""
  // when the child exits or `timeout` passes first.
  std::string WaitForLine(
      const std::string& marker,
      std::chrono::seconds timeout = std::chrono::seconds(30));
  // Sends `sig` and waits up to `timeout` for exit; returns the exit code,
  // -1 for death by signal, -2 on timeout (the child is then killed).
  int SignalAndWait(int sig, std::chrono::seconds timeout);
  // Everything read from stdout so far, and all of stderr once exited.
  const std::string& out() const { return out_; }
  // Whether the child is still running (one that exited is reaped here).
  bool Running();
  std::string err() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string err_path_;
  std::string out_;
  size_t scanned_ = 0;
};

// The integer after `prefix` in `line` ("listening on port 4242" -> 4242).
int NumberAfter(const std::string& line, const std::string& prefix);

// A fresh empty directory under /tmp, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace petra::testing
