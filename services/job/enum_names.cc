#include "services/job/enum_names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace petra::job {
namespace {

// Every enum in petra.v1 names its zero value <PREFIX>UNSPECIFIED.
std::string Prefix(const google::protobuf::EnumDescriptor* type) {
  const google::protobuf::EnumValueDescriptor* zero =
      type->FindValueByNumber(0);
  if (zero == nullptr || !absl::EndsWith(zero->name(), "UNSPECIFIED"))
    return "";
  return zero->name().substr(0, zero->name().size() - 11);
}

}  // namespace

std::string EnumShortName(const google::protobuf::EnumDescriptor* type,
                          int value) {
  const google::protobuf::EnumValueDescriptor* v =
      type->FindValueByNumber(value);
  if (v == nullptr) return absl::StrCat(value);
  std::string name = v->name();
  std::string prefix = Prefix(type);
  if (absl::StartsWith(name, prefix)) name = name.substr(prefix.size());
  return absl::AsciiStrToLower(name);
}

std::vector<std::string> EnumShortNames(
    const google::protobuf::EnumDescriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->value_count(); ++i) {
    if (type->value(i)->number() == 0) continue;
    names.push_back(EnumShortName(type, type->value(i)->number()));
  }
  return names;
}

absl::StatusOr<int> ParseEnumShortName(
    const google::protobuf::EnumDescriptor* type, const std::string& text,
    const std::string& field) {
  std::string wanted =
      absl::AsciiStrToLower(absl::StrReplaceAll(text, {{"-", "_"}}));
  for (int i = 0; i < type->value_count(); ++i) {
    int number = type->value(i)->number();
    if (number != 0 && EnumShortName(type, number) == wanted) return number;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": unknown value \"", text, "\" (expected one of ",
                   absl::StrJoin(EnumShortNames(type), ", "), ")"));
}

}  // namespace petra::job
