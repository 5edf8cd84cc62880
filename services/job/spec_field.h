// A JobSpec field named by its path ("training.micro_batch_size"), set
// from a flag's text and shown as --help shows it, by the field's type in
// the proto descriptor: one setter for every flag that maps straight onto
// a field, instead of one adapter per field.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"

namespace petra::job {

class SpecField {
 public:
  // The field at `path` (message field names joined by dots); NOT_FOUND
  // naming the part that is not a field, INVALID_ARGUMENT for a path
  // through a repeated or non-message field, or to a message.
  static absl::StatusOr<SpecField> Find(const std::string& path);

  // Parses `text` by the field's type into *spec: an unsigned or signed
  // integer (in its range), a finite number, true/false, an enum's short
  // name, a string; a repeated field takes a comma-separated list, which
  // replaces its values (empty text: none). Errors name what was expected.
  absl::Status Set(const std::string& text, petra::v1::JobSpec* spec) const;
  // The field's value in `spec`, as Set takes it back.
  std::string Show(const petra::v1::JobSpec& spec) const;
  // What --help shows as the flag's value: an enum's short names (a|b|c),
  // else `name` (empty for a bool that the flag alone sets).
  std::string ValueName(const std::string& name) const;

 private:
  explicit SpecField(
      std::vector<const google::protobuf::FieldDescriptor*> fields)
      : fields_(std::move(fields)) {}
  std::vector<const google::protobuf::FieldDescriptor*> fields_;
};

}  // namespace petra::job
