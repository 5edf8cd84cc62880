// Waiting for SIGINT/SIGTERM in a long-running main. Libraries (libtorch,
// OpenMP) start threads before main runs, so blocking the signals in main
// cannot cover every thread; instead a handler, whichever thread runs it,
// writes the signal number to a pipe that the waiting thread reads.
#pragma once

namespace petra::base {

// Installs the SIGINT/SIGTERM handlers. Call first thing in main.
void InstallShutdownHandlers();

// Waits until SIGINT or SIGTERM arrives; returns the signal number, or 0
// after WakeShutdownWaiter.
int WaitForShutdownSignal();

// Wakes WaitForShutdownSignal with 0: the program is ending by itself.
void WakeShutdownWaiter();

}  // namespace petra::base
