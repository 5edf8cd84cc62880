// Reading and writing JobSpecs as JSON (proto3 JSON mapping) or text proto.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"

namespace petra::job {

enum class SpecFormat { kJson, kTextProto, kYaml };

// Parses `text`. INVALID_ARGUMENT with the parser's message (line and column
// for text proto and YAML syntax) on syntax errors; for JSON and YAML every
// unknown field and enum name at once, each with its path. JSON and YAML
// (read as the JSON it stands for: yaml_to_json.h) take enum values by their
// short names too ("image_folder", as the flags do; json_enum_names.h).
// Does not validate: call ResolveJobSpec next.
absl::StatusOr<petra::v1::JobSpec> ParseJobSpec(const std::string& text,
                                                SpecFormat format);

// Reads a file; the format follows the extension (.json; .yaml / .yml;
// .txtpb / .textproto / .pbtxt), defaulting to JSON. NOT_FOUND /
// PERMISSION_DENIED name the path.
absl::StatusOr<petra::v1::JobSpec> ReadJobSpecFile(const std::string& path);

// The --from flags' help: the formats ReadJobSpecFile takes.
inline constexpr char kJobSpecFileHelp[] =
    "job spec file: JSON (.json, or any other name), YAML (.yaml, .yml) or "
    "text proto (.txtpb, .textproto, .pbtxt)";

// Pretty JSON with field names as in the proto (snake_case).
std::string JobSpecToJson(const petra::v1::JobSpec& spec);

}  // namespace petra::job
