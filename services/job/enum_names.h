// Short, lower-case names for proto enum values, as users type them in flags
// and read them in output: ARCHITECTURE_REVNET18 <-> "revnet18",
// TRAINING_MODE_PETRA <-> "petra". Derived from the proto descriptors, so the
// proto stays the single source of the names.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace petra::job {

// The short name of `value`, or "<number>" when the enum has no such value.
std::string EnumShortName(const google::protobuf::EnumDescriptor* type,
                          int value);

// All short names except *_UNSPECIFIED, in declaration order.
std::vector<std::string> EnumShortNames(
    const google::protobuf::EnumDescriptor* type);

// Parses a short name (case-insensitive, '-' or '_'). INVALID_ARGUMENT naming
// `field` and listing the accepted names otherwise.
absl::StatusOr<int> ParseEnumShortName(
    const google::protobuf::EnumDescriptor* type, const std::string& text,
    const std::string& field);

template <typename E>
std::string EnumShortName(E value) {
  return EnumShortName(google::protobuf::GetEnumDescriptor<E>(),
                       static_cast<int>(value));
}

}  // namespace petra::job
