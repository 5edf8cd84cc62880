// Running a program to its end with its input given and its output kept:
// for tools whose libraries cannot share our process (SentencePiece bundles
// its own protobuf, whose exported symbols would collide with ours).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace petra::base {

// Runs argv[0] (looked up in PATH) in `working_dir` ("": ours) with `input`
// on its standard input, and returns its standard output. NOT_FOUND when the
// program is not installed (saying so and `install_hint`); INTERNAL when it
// exits non-zero or is killed, with the end of its standard error.
absl::StatusOr<std::string> RunProgram(const std::vector<std::string>& argv,
                                       std::string_view input,
                                       const std::string& install_hint,
                                       const std::string& working_dir = "");

}  // namespace petra::base
