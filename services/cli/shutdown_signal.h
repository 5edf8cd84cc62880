// Waiting for SIGINT/SIGTERM in a long-running main, without async-signal
// hazards: the signals are blocked in every thread and taken by sigwait.
#pragma once

namespace petra::cli {

// Blocks SIGINT and SIGTERM in the calling thread and in every thread it
// starts afterwards. Call first thing in main, before any thread exists.
void BlockShutdownSignals();

// Waits until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForShutdownSignal();

}  // namespace petra::cli
