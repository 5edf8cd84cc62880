// The coordinator's audit log: one JSON line (petra.v1.AuditRecord) per
// control call, appended to a file opened O_APPEND and written by a thread
// of its own, so that a reaction never waits on the disk. Lines are never
// rewritten; a record that cannot be written is counted and said on
// stderr once, and the calls go on.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/access.pb.h"
#include "services/engine/serial_executor.h"

namespace petra::coordinator {

class AuditLog {
 public:
  // Creates the file (mode 0600) or appends to it.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(
      const std::string& path);

  // Stamps the time and queues the line.
  void Append(petra::v1::AuditRecord record);
  const std::string& path() const { return path_; }
  // Records that could not be written (disk full, ...).
  int64_t failures() const { return failures_.load(); }
  // Waits until what was appended so far is written (tests, shutdown).
  void Flush();

 private:
  // Closed after the writer thread has written the last line (members die
  // in reverse order).
  struct File {
    int fd;
    ~File();
  };
  AuditLog(std::string path, int fd) : path_(std::move(path)), file_{fd} {}
  void Write(const std::string& line);

  const std::string path_;
  const File file_;
  std::atomic<int64_t> failures_{0};
  engine::SerialExecutor writer_;
};

}  // namespace petra::coordinator
