#include "services/base/crash_report.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "absl/debugging/symbolize.h"

namespace petra::base {
namespace {

// Only async-signal-safe calls below: write(2), no allocation.
void Write(const char* text) {
  ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void WriteHex(uintptr_t value) {
  char digits[2 + 2 * sizeof(value) + 1];
  char* p = digits + sizeof(digits) - 1;
  *p = '\0';
  do {
    *--p = "0123456789abcdef"[value & 0xf];
    value >>= 4;
  } while (value != 0);
  *--p = 'x';
  *--p = '0';
  Write(p);
}

// One line: the address and its symbol. A return address points after its
// call, so the call itself (one byte less) is looked up; an exact address
// (the faulting instruction) may be a function's first byte.
void WriteFrame(uintptr_t pc, bool exact) {
  char symbol[1024];
  const bool found = absl::Symbolize(
      reinterpret_cast<void*>(exact ? pc : pc - 1), symbol, sizeof(symbol));
  Write("    @ ");
  WriteHex(pc);
  Write("  ");
  Write(found ? symbol : "(unknown)");
  // The object and the offset in it: a symbol alone can name the wrong
  // copy of a function that two libraries define (docs/GPU.md,
  // 2026-11-28). dladdr is not async-signal-safe in theory; it takes no
  // lock that this process holds while it crashes in practice.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(exact ? pc : pc - 1), &info) != 0 &&
      info.dli_fname != nullptr) {
    Write("  in ");
    Write(info.dli_fname);
    Write("+");
    WriteHex(pc - reinterpret_cast<uintptr_t>(info.dli_fbase));
  }
  Write("\n");
}

constexpr struct {
  int number;
  const char* name;
} kFatalSignals[] = {{SIGSEGV, "SIGSEGV"},
                     {SIGABRT, "SIGABRT"},
                     {SIGBUS, "SIGBUS"},
                     {SIGFPE, "SIGFPE"},
                     {SIGILL, "SIGILL"}};

// The stack comes from glibc's backtrace(), which unwinds through
// .eh_frame: Abseil's own failure handler walks frame pointers, which a
// Release build does not keep. Neither unwinds from a call through a null
// pointer (no code at address 0 to describe its frame); then the caller's
// return address is the word on top of the stack, and it is printed
// first.
void OnFatalSignal(int number, siginfo_t*, void* context) {
  const char* name = "a fatal signal";
  for (const auto& s : kFatalSignals) {
    if (s.number == number) name = s.name;
  }
  Write("*** ");
  Write(name);
  Write(" received; the crashing thread's stack:\n");
#if defined(__x86_64__)
  const auto* registers = &static_cast<ucontext_t*>(context)->uc_mcontext;
  const uintptr_t fault = static_cast<uintptr_t>(registers->gregs[REG_RIP]);
  if (fault == 0) {
    Write("    (a call through a null pointer, from:)\n");
    const auto* stack =
        reinterpret_cast<const uintptr_t*>(registers->gregs[REG_RSP]);
    WriteFrame(stack[0], false);
    // Nothing unwinds from address 0, so the callers further up are
    // guessed: words on the stack that point into a loaded object's code.
    Write("    (then, guessed from the words on the stack:)\n");
    int shown = 0;
    for (int i = 1; i < 64 && shown < 8; ++i) {
      Dl_info info;
      char symbol[1024];
      void* call = reinterpret_cast<void*>(stack[i] - 1);
      if (dladdr(call, &info) != 0 &&
          absl::Symbolize(call, symbol, sizeof(symbol))) {
        WriteFrame(stack[i], false);
        ++shown;
      }
    }
  }
#else
  (void)context;
  const uintptr_t fault = 0;
#endif
  void* frames[64];
  const int n = backtrace(frames, 64);
  for (int i = 0; i < n; ++i) {
    const uintptr_t pc = reinterpret_cast<uintptr_t>(frames[i]);
    WriteFrame(pc, i == 0 || pc == fault);
  }
  // SA_RESETHAND restored the default action: die of the signal, so that
  // the shell, CTest and the orchestrator see the crash for what it is.
  raise(number);
}

}  // namespace

void InstallCrashReport(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  void* warm_up[1];
  backtrace(warm_up, 1);  // loads libgcc now, not inside the handler
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = OnFatalSignal;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (const auto& s : kFatalSignals) sigaction(s.number, &action, nullptr);
}

}  // namespace petra::base
