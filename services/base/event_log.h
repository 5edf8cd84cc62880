// The servers' log: one line per event that matters (server up, job
// assigned, epoch, checkpoint, recovery, job end with its reason), through
// glog, which levels and timestamps it ("I20261125 13:20:01.123456 4242
// stage_host.cc:150] job_assigned job_id=job-3 stage=1 ..."). After the
// prefix comes the event and its fields as key=value, a value quoted
// JSON-style when it holds a space, a quote or '=': readable as text and
// parseable as logfmt. Lines go to standard output, line by line (what
// `kubectl logs` and `docker logs` collect, and what tests wait for).
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace petra::base {

enum class LogLevel { kInfo, kWarning, kError };

// Call once at the start of main: glog to standard output (servers) or to
// standard error from `min_level` up (the client, whose standard output is
// its own), no log files.
void InitEventLog(const char* program, bool to_stdout = true,
                  LogLevel min_level = LogLevel::kInfo);

struct LogField {
  absl::string_view key;
  std::string value;
};

// "event key=value ...".
std::string EventText(absl::string_view event,
                      absl::Span<const LogField> fields);

// Logs one event from `file`:`line` (PETRA_LOG_EVENT fills them).
void LogEventAt(const char* file, int line, LogLevel level,
                absl::string_view event, absl::Span<const LogField> fields);

}  // namespace petra::base

#define PETRA_LOG_EVENT(level, event, ...)                         \
  ::petra::base::LogEventAt(__FILE__, __LINE__,                    \
                            ::petra::base::LogLevel::level, event, \
                            {__VA_ARGS__})
// The same with the level a value (a LogLevel) chosen at run time.
#define PETRA_LOG_EVENT_IF(level_value, event, ...)                 \
  ::petra::base::LogEventAt(__FILE__, __LINE__, level_value, event, \
                            {__VA_ARGS__})
