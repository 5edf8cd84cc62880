#include "coordinator/stage_list.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/wire/grpc_defaults.h"

namespace petra::coordinator {
namespace {

// A fleet far larger than any pipeline we plan: a typo guard.
constexpr int kMaxStages = 4096;

absl::Status ExpandEntry(const std::string& entry,
                         std::vector<std::string>* out) {
  size_t open = entry.find('{');
  if (open == std::string::npos) {
    if (entry.find('}') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--stages: \"", entry, "\" has '}' without '{'"));
    }
    out->push_back(entry);
    return absl::OkStatus();
  }
  size_t close = entry.find('}', open);
  size_t dots = entry.find("..", open);
  if (close == std::string::npos || dots == std::string::npos || dots > close ||
      entry.find('{', open + 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stages: \"", entry, "\" needs exactly one range like {0..3}"));
  }
  int first, last;
  if (!absl::SimpleAtoi(entry.substr(open + 1, dots - open - 1), &first) ||
      !absl::SimpleAtoi(entry.substr(dots + 2, close - dots - 2), &last) ||
      first < 0 || last < first) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stages: \"", entry, "\": range must be {A..B} with 0 <= A <= B"));
  }
  if (last - first + 1 > kMaxStages) {
    return absl::InvalidArgumentError(absl::StrCat("--stages: \"", entry,
                                                   "\" expands to more than ",
                                                   kMaxStages, " stages"));
  }
  const std::string head = entry.substr(0, open);
  const std::string tail = entry.substr(close + 1);
  for (int i = first; i <= last; ++i)
    out->push_back(absl::StrCat(head, i, tail));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandStageList(
    const std::string& flag_value) {
  std::vector<std::string> addresses;
  for (absl::string_view raw : absl::StrSplit(flag_value, ',')) {
    std::string entry(absl::StripAsciiWhitespace(raw));
    if (entry.empty()) continue;
    if (absl::Status s = ExpandEntry(entry, &addresses); !s.ok()) return s;
  }
  if (addresses.empty()) {
    return absl::InvalidArgumentError(
        "--stages: no stage server addresses given (e.g. "
        "--stages 10.0.0.1:50051,10.0.0.2:50051 or "
        "--stages petra-stage-{0..3}.petra-stage:50051)");
  }
  if (addresses.size() > static_cast<size_t>(kMaxStages)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stages: more than ", kMaxStages, " addresses"));
  }
  std::set<std::string> seen;
  for (const std::string& a : addresses) {
    if (absl::Status s = wire::ValidateAddress(a, "--stages", false); !s.ok()) {
      return s;
    }
    if (!seen.insert(a).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--stages: \"", a, "\" appears twice"));
    }
  }
  return addresses;
}

}  // namespace petra::coordinator
