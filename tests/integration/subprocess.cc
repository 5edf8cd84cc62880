#include "tests/integration/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "services/base/paths.h"

namespace petra::testing {
namespace {

using Clock = std::chrono::steady_clock;

pid_t Spawn(const std::string& path, const std::vector<std::string>& args,
            int out_fd, int err_fd) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // parent already gone
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    // Signals the test blocked must not stay blocked in the child.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// waitpid with a deadline; returns the exit code, -1 for a signal, -2 on
// timeout.
int WaitUntil(pid_t pid, Clock::time_point deadline) {
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (Clock::now() > deadline) return -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string TempPath(const char* stem) {
  std::string tmpl = std::string("/tmp/") + stem + "XXXXXX";
  int fd = mkstemp(tmpl.data());
  close(fd);
  return tmpl;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

RunResult RunToExit(const std::string& path,
                    const std::vector<std::string>& args,
                    std::chrono::seconds timeout) {
  std::string out_path = TempPath("petra_out_");
  std::string err_path = TempPath("petra_err_");
  int out_fd = open(out_path.c_str(), O_WRONLY | O_TRUNC);
  int err_fd = open(err_path.c_str(), O_WRONLY | O_TRUNC);
  pid_t pid = Spawn(path, args, out_fd, err_fd);
  close(out_fd);
  close(err_fd);
  RunResult result;
  result.exit_code = WaitUntil(pid, Clock::now() + timeout);
  if (result.exit_code == -2) {
    result.timed_out = true;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    result.exit_code = -1;
  }
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  return result;
}

Subprocess::Subprocess(const std::string& path,
                       const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return;
  err_path_ = TempPath("petra_err_");
  int err_fd = open(err_path_.c_str(), O_WRONLY | O_TRUNC);
  pid_ = Spawn(path, args, pipe_fds[1], err_fd);
  close(pipe_fds[1]);
  close(err_fd);
  out_fd_ = pipe_fds[0];
  fcntl(out_fd_, F_SETFL, O_NONBLOCK);
}

Subprocess::~Subprocess() {
  if (pid_ > 0) SignalAndWait(SIGTERM, std::chrono::seconds(10));
  if (out_fd_ >= 0) close(out_fd_);
  if (!err_path_.empty()) std::remove(err_path_.c_str());
}

std::string Subprocess::WaitForLine(const std::string& marker,
                                    std::chrono::seconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    // Look for a complete line holding the marker in what we have.
    size_t line_start = scanned_;
    for (size_t nl; (nl = out_.find('\n', line_start)) != std::string::npos;
         line_start = nl + 1) {
      std::string line = out_.substr(line_start, nl - line_start);
      scanned_ = nl + 1;
      if (line.find(marker) != std::string::npos) return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0 || out_fd_ < 0) return "";
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 200))) <=
        0) {
      continue;
    }
    char buf[4096];
    ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n == 0) return "";  // the child closed stdout: it exited
    if (n > 0) out_.append(buf, n);
  }
}

int Subprocess::SignalAndWait(int sig, std::chrono::seconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int code = WaitUntil(pid_, Clock::now() + timeout);
  if (code == -2) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  // Keep whatever the child printed on its way out.
  char buf[4096];
  ssize_t n;
  while (out_fd_ >= 0 && (n = read(out_fd_, buf, sizeof(buf))) > 0) {
    out_.append(buf, n);
  }
  pid_ = -1;
  return code;
}

bool Subprocess::Running() {
  if (pid_ <= 0) return false;
  if (waitpid(pid_, nullptr, WNOHANG) != pid_) return true;
  pid_ = -1;
  return false;
}

std::string Subprocess::err() const { return ReadFile(err_path_); }

int NumberAfter(const std::string& line, const std::string& prefix) {
  size_t at = line.find(prefix);
  if (at == std::string::npos) return -1;
  return std::atoi(line.c_str() + at + prefix.size());
}

TempDir::TempDir() {
  std::string tmpl = "/tmp/petra_test_XXXXXX";
  path_ = mkdtemp(tmpl.data());
}

TempDir::~TempDir() {
  std::error_code ec;
  petra::base::RemoveTree(path_).IgnoreError();
}

}  // namespace petra::testing
