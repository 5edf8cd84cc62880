#include "services/base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace petra::base {
namespace {

// The last bytes of a program's standard error that a message quotes.
constexpr size_t kStderrTail = 2000;

struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
  void Close(int end) {
    if (fd[end] >= 0) close(fd[end]);
    fd[end] = -1;
  }
};

}  // namespace

absl::StatusOr<std::string> RunProgram(const std::vector<std::string>& argv,
                                       std::string_view input,
                                       const std::string& install_hint,
                                       const std::string& working_dir) {
  Pipe in, out, err;
  // Its input a socket: send's MSG_NOSIGNAL turns a program that stopped
  // reading into EPIPE, not a SIGPIPE that would end us.
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in.fd) != 0 ||
      pipe2(out.fd, O_CLOEXEC) != 0 || pipe2(err.fd, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.fd[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd[1], 2);
  if (!working_dir.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, working_dir.c_str());
  }
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int spawned =
      posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    if (spawned == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat(argv[0], " is not installed (", install_hint, ")"));
    }
    return absl::InternalError(
        absl::StrCat("running ", argv[0], ": ", std::strerror(spawned)));
  }
  in.Close(0);
  out.Close(1);
  err.Close(1);
  // Writing while reading: a program that answers as it reads would fill
  // its output pipe and wait on us otherwise.
  fcntl(in.fd[1], F_SETFL, O_NONBLOCK);
  if (input.empty()) in.Close(1);
  std::string stdout_text, stderr_text;
  size_t written = 0;
  char buffer[1 << 16];
  while (out.fd[0] >= 0 || err.fd[0] >= 0) {
    pollfd fds[3];
    int n = 0;
    int* owners[3];
    for (int* fd : {&in.fd[1], &out.fd[0], &err.fd[0]}) {
      if (*fd < 0) continue;
      fds[n] = {*fd, static_cast<short>(fd == &in.fd[1] ? POLLOUT : POLLIN), 0};
      owners[n++] = fd;
    }
    if (poll(fds, static_cast<nfds_t>(n), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      int& fd = *owners[i];
      if (&fd == &in.fd[1]) {
        const ssize_t w = send(fd, input.data() + written,
                               input.size() - written, MSG_NOSIGNAL);
        if (w > 0) written += static_cast<size_t>(w);
        // EPIPE: the program stopped reading; its exit status says why.
        if ((w < 0 && errno != EAGAIN && errno != EINTR) ||
            written == input.size()) {
          in.Close(1);
        }
        continue;
      }
      const ssize_t r = read(fd, buffer, sizeof buffer);
      if (r > 0) {
        (&fd == &out.fd[0] ? stdout_text : stderr_text)
            .append(buffer, static_cast<size_t>(r));
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(fd);
        fd = -1;
      }
    }
  }
  in.Close(1);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return stdout_text;
  if (stderr_text.size() > kStderrTail) {
    stderr_text = "..." + stderr_text.substr(stderr_text.size() - kStderrTail);
  }
  return absl::InternalError(absl::StrCat(
      argv[0],
      WIFEXITED(wstatus)
          ? absl::StrCat(" exited with status ", WEXITSTATUS(wstatus))
          : absl::StrCat(" was killed by signal ", WTERMSIG(wstatus)),
      stderr_text.empty() ? "" : ": ", stderr_text));
}

}  // namespace petra::base
