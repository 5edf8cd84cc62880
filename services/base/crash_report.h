// A crash prints the crashing thread's stack, symbolised, before the
// process dies of the same signal: on a host nobody can attach a debugger
// to (a GPU lent for minutes, a pod that restarts) the log then names where
// it happened. Every main and every test binary installs it.
#pragma once

namespace petra::base {

// Installs the handler for SIGSEGV, SIGABRT, SIGBUS, SIGFPE and SIGILL.
// Call first thing in main, with argv[0] (for the symboliser).
void InstallCrashReport(const char* argv0);

}  // namespace petra::base
