#include "services/job/job_spec_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "services/base/proto_json.h"
#include "services/base/small_file.h"
#include "services/job/json_enum_names.h"
#include "services/job/yaml_to_json.h"

namespace petra::job {
namespace {

// Largest spec file we read; a JobSpec is a few KB.
constexpr std::streamoff kMaxSpecFileBytes = 1 << 20;

}  // namespace

absl::StatusOr<petra::v1::JobSpec> ParseJobSpec(const std::string& text,
                                                SpecFormat format) {
  petra::v1::JobSpec spec;
  if (format == SpecFormat::kYaml) {
    absl::StatusOr<std::string> json = YamlToJson(text);
    if (!json.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec ", json.status().message()));
    }
    absl::StatusOr<petra::v1::JobSpec> parsed =
        ParseJobSpec(*json, SpecFormat::kJson);
    if (!parsed.ok()) {
      // The JSON is ours; the user wrote YAML.
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec YAML",
          parsed.status().message().substr(sizeof("job spec JSON") - 1)));
    }
    return parsed;
  }
  if (format == SpecFormat::kJson) {
    const auto* type = petra::v1::JobSpec::descriptor();
    if (std::vector<std::string> unknown = UnknownNamesInJson(text, type);
        !unknown.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec JSON: ", absl::StrJoin(unknown, "; ")));
    }
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    auto status = google::protobuf::util::JsonStringToMessage(
        ExpandShortEnumNames(text, type), &spec, options);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec JSON: ", status.message().as_string()));
    }
    return spec;
  }
  if (absl::Status s = base::ParseTextProto(text, &spec, "job spec text proto");
      !s.ok()) {
    return s;
  }
  return spec;
}

absl::StatusOr<petra::v1::JobSpec> ReadJobSpecFile(const std::string& path) {
  absl::StatusOr<std::string> text =
      base::ReadSmallFile(path, kMaxSpecFileBytes, "a job spec");
  if (!text.ok()) return text.status();
  SpecFormat format = SpecFormat::kJson;
  if (absl::EndsWith(path, ".txtpb") || absl::EndsWith(path, ".textproto") ||
      absl::EndsWith(path, ".pbtxt")) {
    format = SpecFormat::kTextProto;
  } else if (absl::EndsWith(path, ".yaml") || absl::EndsWith(path, ".yml")) {
    format = SpecFormat::kYaml;
  }
  absl::StatusOr<petra::v1::JobSpec> spec = ParseJobSpec(*text, format);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

std::string JobSpecToJson(const petra::v1::JobSpec& spec) {
  return base::ProtoToJson(spec);
}

}  // namespace petra::job
