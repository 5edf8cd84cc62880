#include "services/base/event_log.h"

#include <glog/logging.h>

#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "services/base/json_text.h"

namespace petra::base {

namespace {

google::LogSeverity Severity(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return google::GLOG_ERROR;
    case LogLevel::kWarning:
      return google::GLOG_WARNING;
    default:
      return google::GLOG_INFO;
  }
}

}  // namespace

void InitEventLog(const char* program, bool to_stdout, LogLevel min_level) {
  static std::once_flag once;
  std::call_once(once, [&] {
    FLAGS_logtostdout = to_stdout;
    FLAGS_logtostderr = !to_stdout;
    FLAGS_minloglevel = Severity(min_level);
    // Lines reach a pipe (a test, a container runtime) as they are written.
    if (to_stdout) std::setvbuf(stdout, nullptr, _IOLBF, 0);
    google::InitGoogleLogging(program);
  });
}

std::string EventText(absl::string_view event,
                      absl::Span<const LogField> fields) {
  std::string out(event);
  for (const LogField& f : fields) {
    const bool quote = f.value.empty() ||
                       f.value.find_first_of(" \"=\t\n\\") != std::string::npos;
    absl::StrAppend(&out, " ", f.key, "=",
                    quote ? JsonString(f.value) : f.value);
  }
  return out;
}

void LogEventAt(const char* file, int line, LogLevel level,
                absl::string_view event, absl::Span<const LogField> fields) {
  google::LogMessage(file, line, Severity(level)).stream()
      << EventText(event, fields);
}

}  // namespace petra::base
