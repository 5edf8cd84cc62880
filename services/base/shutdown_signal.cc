#include "services/base/shutdown_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace petra::base {
namespace {

int pipe_fds[2] = {-1, -1};

void OnSignal(int sig) {
  const int saved = errno;  // the handler may interrupt any code
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(pipe_fds[1], &byte, 1);
  errno = saved;
}

}  // namespace

void InstallShutdownHandlers() {
  if (pipe_fds[0] < 0 && pipe(pipe_fds) == 0) {
    fcntl(pipe_fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(pipe_fds[1], F_SETFD, FD_CLOEXEC);
    // A full pipe must not block the handler; later signals are redundant.
    fcntl(pipe_fds[1], F_SETFL, O_NONBLOCK);
  }
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int WaitForShutdownSignal() {
  unsigned char byte = 0;
  while (true) {
    ssize_t n = read(pipe_fds[0], &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    return SIGTERM;  // the pipe is gone: treat as a request to stop
  }
}

void WakeShutdownWaiter() {
  const unsigned char byte = 0;
  [[maybe_unused]] ssize_t n = write(pipe_fds[1], &byte, 1);
}

}  // namespace petra::base
