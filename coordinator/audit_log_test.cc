// The audit log: one JSON line per record, appended across openings,
// written off the caller's thread, and a log that cannot be opened refused.
#include "coordinator/audit_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace petra::coordinator {
namespace {

using ::testing::HasSubstr;

std::vector<petra::v1::AuditRecord> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<petra::v1::AuditRecord> out;
  for (std::string line; std::getline(in, line);) {
    petra::v1::AuditRecord r;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &r).ok())
        << line;
    out.push_back(r);
  }
  return out;
}

TEST(AuditLog, AppendsOneJsonLinePerCallAcrossOpenings) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            absl::StrCat("petra-audit-", ::getpid(), ".log"))
                               .string();
  std::remove(path.c_str());
  for (int opening = 0; opening < 2; ++opening) {
    absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    for (int i = 0; i < 3; ++i) {
      petra::v1::AuditRecord r;
      r.set_user("bo");
      r.set_role(petra::v1::ROLE_MEMBER);
      r.set_call("CancelJob");
      r.set_job_id(absl::StrCat("job-", opening * 3 + i));
      r.set_code("PERMISSION_DENIED");
      r.set_message("a \"quoted\"\nmessage");
      (*log)->Append(r);
    }
    (*log)->Flush();
    EXPECT_EQ((*log)->failures(), 0);
  }
  const std::vector<petra::v1::AuditRecord> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(lines[i].job_id(), absl::StrCat("job-", i));
    EXPECT_EQ(lines[i].message(), "a \"quoted\"\nmessage");
    EXPECT_GT(lines[i].time().seconds(), 0);
  }
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // who did what is not for everyone
  std::remove(path.c_str());
}

TEST(AuditLog, AnUnopenableLogIsRefused) {
  absl::StatusOr<std::unique_ptr<AuditLog>> log =
      AuditLog::Open("/nonexistent-dir/audit.log");
  EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(log.status().message(), HasSubstr("--audit-log"));
}

}  // namespace
}  // namespace petra::coordinator
