#include "services/sim/profile_io.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "services/base/proto_json.h"
#include "services/base/small_file.h"

namespace petra::sim {
namespace {

// A profile is ~300 bytes per stage; this allows tens of thousands.
constexpr std::streamoff kMaxProfileFileBytes = 16 << 20;

// Byte and parameter counts beyond this are not a real stage (and would
// overflow the simulator's sums).
constexpr uint64_t kMaxCount = uint64_t{1} << 40;

absl::Status FieldError(int i, const char* field, const std::string& value,
                        const char* why) {
  return absl::InvalidArgumentError(
      absl::StrCat("stages[", i, "].", field, " = ", value, ": ", why));
}

}  // namespace

absl::StatusOr<petra::v1::Profile> ParseProfileJson(const std::string& text) {
  petra::v1::Profile profile;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status =
      google::protobuf::util::JsonStringToMessage(text, &profile, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile JSON: ", status.message().as_string()));
  }
  return profile;
}

absl::StatusOr<petra::v1::Profile> ReadProfileFile(const std::string& path) {
  absl::StatusOr<std::string> text =
      base::ReadSmallFile(path, kMaxProfileFileBytes, "a profile");
  if (!text.ok()) return text.status();
  absl::StatusOr<petra::v1::Profile> profile = ParseProfileJson(*text);
  if (!profile.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", profile.status().message()));
  }
  return profile;
}

std::string ProfileToJson(const petra::v1::Profile& profile) {
  base::ProtoJsonOptions options;
  options.all_fields = true;
  return base::ProtoToJson(profile, options);
}

absl::Status ValidateProfile(const petra::v1::Profile& p) {
  if (p.stages_size() == 0) {
    return absl::InvalidArgumentError(
        "stages: none; a profile needs at least one");
  }
  if (p.micro_batch_size() < 1) {
    return absl::InvalidArgumentError(
        "micro_batch_size = 0: must be at least 1 (the samples the times are "
        "for)");
  }
  int prev_end = -1;  // end_block of the previous stage when given
  for (int i = 0; i < p.stages_size(); ++i) {
    const petra::v1::StageProfile& s = p.stages(i);
    if (s.index() != static_cast<uint32_t>(i)) {
      return FieldError(i, "index", absl::StrCat(s.index()),
                        "stages must be listed in order from 0");
    }
    const std::pair<const char*, double> times[] = {
        {"forward_seconds", s.forward_seconds()},
        {"backward_seconds", s.backward_seconds()},
        {"backward_stored_seconds", s.backward_stored_seconds()},
        {"forward_stored_seconds", s.forward_stored_seconds()}};
    for (const auto& [name, value] : times) {
      if (!std::isfinite(value) || value < 0) {
        return FieldError(i, name, absl::StrCat(value),
                          "must be a finite number >= 0");
      }
    }
    const std::pair<const char*, uint64_t> counts[] = {
        {"parameters", s.parameters()},
        {"input_bytes", s.input_bytes()},
        {"output_bytes", s.output_bytes()},
        {"activation_bytes", s.activation_bytes()}};
    for (const auto& [name, value] : counts) {
      if (value > kMaxCount) {
        return FieldError(i, name, absl::StrCat(value),
                          "too large for one stage");
      }
    }
    // Block ranges are optional (a hand-written profile may omit them).
    const bool has_blocks = s.first_block() != 0 || s.end_block() != 0;
    if (has_blocks) {
      if (s.end_block() <= s.first_block()) {
        return FieldError(i, "end_block", absl::StrCat(s.end_block()),
                          "must be greater than first_block");
      }
      if (prev_end >= 0 && s.first_block() != static_cast<uint32_t>(prev_end)) {
        return FieldError(i, "first_block", absl::StrCat(s.first_block()),
                          "must equal the previous stage's end_block");
      }
      prev_end = static_cast<int>(s.end_block());
    } else {
      prev_end = -1;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StageCost>> StageCostsFromProfile(
    const petra::v1::Profile& profile) {
  if (absl::Status s = ValidateProfile(profile); !s.ok()) return s;
  std::vector<StageCost> costs;
  for (const petra::v1::StageProfile& s : profile.stages()) {
    StageCost c;
    c.forward_seconds = s.forward_seconds();
    c.backward_seconds = s.backward_seconds();
    c.backward_stored_seconds = s.backward_stored_seconds();
    c.forward_stored_seconds = s.forward_stored_seconds();
    c.input_bytes = static_cast<int64_t>(s.input_bytes());
    c.output_bytes = static_cast<int64_t>(s.output_bytes());
    c.activation_bytes = static_cast<int64_t>(s.activation_bytes());
    c.parameters = static_cast<int64_t>(s.parameters());
    c.reversible = s.reversible();
    costs.push_back(c);
  }
  return costs;
}

}  // namespace petra::sim
