#include "services/job/spec_field.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/base/flag_set.h"
#include "services/job/enum_names.h"

namespace petra::job {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// One value of `f` (a repeated field's element) parsed from `text` into
// `m`: set, or added when `f` is repeated.
absl::Status SetOne(const FieldDescriptor* f, const std::string& text,
                    Message* m) {
  const Reflection* r = m->GetReflection();
  const bool add = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32: {
      absl::StatusOr<uint32_t> v = base::ParseUnsignedValue<uint32_t>(text);
      if (!v.ok()) return v.status();
      add ? r->AddUInt32(m, f, *v) : r->SetUInt32(m, f, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      absl::StatusOr<uint64_t> v = base::ParseUnsignedValue<uint64_t>(text);
      if (!v.ok()) return v.status();
      add ? r->AddUInt64(m, f, *v) : r->SetUInt64(m, f, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT32: {
      absl::StatusOr<int64_t> v = base::ParseIntValue(text);
      if (!v.ok()) return v.status();
      if (*v < std::numeric_limits<int32_t>::min() ||
          *v > std::numeric_limits<int32_t>::max()) {
        return base::BadValue(text, "a 32-bit integer (out of range)");
      }
      const auto n = static_cast<int32_t>(*v);
      add ? r->AddInt32(m, f, n) : r->SetInt32(m, f, n);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      absl::StatusOr<int64_t> v = base::ParseIntValue(text);
      if (!v.ok()) return v.status();
      add ? r->AddInt64(m, f, *v) : r->SetInt64(m, f, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      absl::StatusOr<double> v = base::ParseDoubleValue(text);
      if (!v.ok()) return v.status();
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
        const auto x = static_cast<float>(*v);
        add ? r->AddFloat(m, f, x) : r->SetFloat(m, f, x);
      } else {
        add ? r->AddDouble(m, f, *v) : r->SetDouble(m, f, *v);
      }
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      absl::StatusOr<bool> v = base::ParseBoolValue(text);
      if (!v.ok()) return v.status();
      add ? r->AddBool(m, f, *v) : r->SetBool(m, f, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      absl::StatusOr<int> v = ParseEnumShortName(f->enum_type(), text, "value");
      if (!v.ok()) return v.status();
      add ? r->AddEnumValue(m, f, *v) : r->SetEnumValue(m, f, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING:
      add ? r->AddString(m, f, text) : r->SetString(m, f, text);
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return absl::InternalError(
      absl::StrCat(f->full_name(), " is a message: no flag sets it whole"));
}

// Element `i` of `f` in `m` (-1: the singular value), as Set takes it.
std::string ShowOne(const FieldDescriptor* f, const Message& m, int i) {
  const Reflection* r = m.GetReflection();
  const bool rep = i >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(rep ? r->GetRepeatedUInt32(m, f, i)
                              : r->GetUInt32(m, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(rep ? r->GetRepeatedUInt64(m, f, i)
                              : r->GetUInt64(m, f));
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(rep ? r->GetRepeatedInt32(m, f, i)
                              : r->GetInt32(m, f));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(rep ? r->GetRepeatedInt64(m, f, i)
                              : r->GetInt64(m, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return absl::StrCat(rep ? r->GetRepeatedDouble(m, f, i)
                              : r->GetDouble(m, f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return absl::StrCat(rep ? r->GetRepeatedFloat(m, f, i)
                              : r->GetFloat(m, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f)) ? "true"
                                                                    : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return EnumShortName(
          f->enum_type(),
          rep ? r->GetRepeatedEnumValue(m, f, i) : r->GetEnumValue(m, f));
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "";
}

}  // namespace

absl::StatusOr<SpecField> SpecField::Find(const std::string& path) {
  std::vector<const FieldDescriptor*> fields;
  const google::protobuf::Descriptor* d = petra::v1::JobSpec::descriptor();
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (d == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", fields.back()->name(), " is not a message"));
    }
    const FieldDescriptor* f = d->FindFieldByName(std::string(part));
    if (f == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(path, ": ", d->full_name(), " has no field ", part));
    }
    if (d != petra::v1::JobSpec::descriptor() && fields.back()->is_repeated()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", fields.back()->name(), " is repeated"));
    }
    fields.push_back(f);
    d = f->message_type();
  }
  if (d != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a message, not a value"));
  }
  return SpecField(std::move(fields));
}

absl::Status SpecField::Set(const std::string& text,
                            petra::v1::JobSpec* spec) const {
  Message* m = spec;
  for (size_t i = 0; i + 1 < fields_.size(); ++i) {
    m = m->GetReflection()->MutableMessage(m, fields_[i]);
  }
  const FieldDescriptor* f = fields_.back();
  if (!f->is_repeated()) return SetOne(f, text, m);
  m->GetReflection()->ClearField(m, f);
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    if (absl::Status s = SetOne(f, std::string(part), m); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string SpecField::Show(const petra::v1::JobSpec& spec) const {
  const Message* m = &spec;
  for (size_t i = 0; i + 1 < fields_.size(); ++i) {
    m = &m->GetReflection()->GetMessage(*m, fields_[i]);
  }
  const FieldDescriptor* f = fields_.back();
  if (!f->is_repeated()) return ShowOne(f, *m, -1);
  std::vector<std::string> values;
  const int n = m->GetReflection()->FieldSize(*m, f);
  for (int i = 0; i < n; ++i) values.push_back(ShowOne(f, *m, i));
  return absl::StrJoin(values, ",");
}

std::string SpecField::ValueName(const std::string& name) const {
  const FieldDescriptor* f = fields_.back();
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
    return absl::StrJoin(EnumShortNames(f->enum_type()), "|");
  }
  return name;
}

}  // namespace petra::job
