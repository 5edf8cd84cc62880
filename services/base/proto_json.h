// Protobuf messages as JSON, the one way this project prints them: field
// names as in the .proto (snake_case), in spec files, `--json` output, job
// records and profiles alike, so a key read in one is the key in all.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace petra::base {

struct ProtoJsonOptions {
  bool pretty = true;  // indented, ending in a newline; else one line
  // Fields at their default value too (a profile's zeros are measurements).
  bool all_fields = false;
};

// `message` as JSON. Printing a message that was built or parsed cannot
// fail; should it, the result is "{}" rather than an empty string.
std::string ProtoToJson(const google::protobuf::Message& message,
                        ProtoJsonOptions options = {});

// Parses a text proto into `message`; INVALID_ARGUMENT "<what>: line L,
// column C: ..." at the first error.
absl::Status ParseTextProto(const std::string& text,
                            google::protobuf::Message* message,
                            const std::string& what);

}  // namespace petra::base
