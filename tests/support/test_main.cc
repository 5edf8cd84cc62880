// The main of every GoogleTest binary: gtest's own, plus a handler that
// prints the crashing thread's stack (symbolised) before the process dies
// of the same signal. A crash on a host where nobody can attach a debugger
// (a GPU lent for minutes) then names where it happened in the test's own
// output. The stack comes from glibc's backtrace(), which unwinds through
// .eh_frame: Abseil's own failure handler walks frame pointers, which a
// Release build does not keep, and printed nothing useful.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "absl/debugging/symbolize.h"

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

constexpr struct {
  int number;
  const char* name;
} kFatalSignals[] = {{SIGSEGV, "SIGSEGV"},
                     {SIGABRT, "SIGABRT"},
                     {SIGBUS, "SIGBUS"},
                     {SIGFPE, "SIGFPE"},
                     {SIGILL, "SIGILL"}};

// The faulting instruction's own address (the frame after the signal
// trampoline), where the context says; 0 elsewhere.
uintptr_t FaultingPc(void* context) {
#if defined(__x86_64__)
  return static_cast<uintptr_t>(
      static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#else
  (void)context;
  return 0;
#endif
}

void OnFatalSignal(int number, siginfo_t*, void* context) {
  const char* name = "a fatal signal";
  for (const auto& s : kFatalSignals) {
    if (s.number == number) name = s.name;
  }
  Write("*** ");
  Write(name);
  Write(" received; the crashing thread's stack:\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  const uintptr_t fault = FaultingPc(context);
  for (int i = 0; i < n; ++i) {
    char symbol[1024];
    // A return address points after its call: look up the call itself. The
    // faulting instruction's address is exact (it may be a function's
    // first, where one byte less is another function).
    const uintptr_t pc = reinterpret_cast<uintptr_t>(frames[i]);
    const bool exact = i == 0 || pc == fault;
    const bool found = absl::Symbolize(
        reinterpret_cast<void*>(exact ? pc : pc - 1), symbol, sizeof(symbol));
    Write("    @ ");
    WriteHex(reinterpret_cast<uintptr_t>(frames[i]));
    Write("  ");
    Write(found ? symbol : "(unknown)");
    Write("\n");
  }
  // SA_RESETHAND restored the default action: die of the signal, so that
  // CTest and the shell see the crash for what it is.
  raise(number);
}

void InstallCrashHandler() {
  void* warm_up[1];
  backtrace(warm_up, 1);  // loads libgcc now, not inside the handler
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = OnFatalSignal;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (const auto& s : kFatalSignals) sigaction(s.number, &action, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  absl::InitializeSymbolizer(argv[0]);
  InstallCrashHandler();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
