// YAML job specs (what Kubernetes users write) read as the JSON they stand
// for, so one parser and one set of checks serve both.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace petra::job {

// The JSON text of a YAML document. Plain scalars are typed by YAML 1.2's
// core schema (null, true/false, integers in decimal, 0x or 0o, floats,
// .inf and .nan as the strings "Infinity"/"NaN" that proto JSON reads);
// quoted scalars stay strings; numbers keep every digit (a uint64 seed
// survives). INVALID_ARGUMENT with the line and column of a syntax error or
// of a mapping key that is not a scalar; a spec is one mapping. An empty
// document is `{}`.
absl::StatusOr<std::string> YamlToJson(const std::string& yaml);

}  // namespace petra::job
