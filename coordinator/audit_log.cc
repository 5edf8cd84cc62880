#include "coordinator/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "services/base/proto_json.h"
#include "services/base/timestamp.h"

namespace petra::coordinator {

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(
    const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--audit-log \"", path, "\": cannot open it: ", std::strerror(errno)));
  }
  return std::unique_ptr<AuditLog>(new AuditLog(path, fd));
}

AuditLog::File::~File() { ::close(fd); }

void AuditLog::Append(petra::v1::AuditRecord record) {
  *record.mutable_time() = base::NowTimestamp();
  std::string line =
      base::ProtoToJson(record, base::ProtoJsonOptions{/*pretty=*/false});
  line.push_back('\n');
  if (!writer_.Post([this, line = std::move(line)] { Write(line); })) {
    failures_.fetch_add(1);
  }
}

void AuditLog::Write(const std::string& line) {
  // One write(2) per line: with O_APPEND, lines never interleave.
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(file_.fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (failures_.fetch_add(1) == 0) {
        std::cerr << "petra-coordinator: cannot write the audit log " << path_
                  << ": " << std::strerror(errno) << "\n";
      }
      return;
    }
    done += static_cast<size_t>(n);
  }
}

void AuditLog::Flush() {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  if (writer_.Post([done] { done->set_value(); })) f.wait();
}

}  // namespace petra::coordinator
