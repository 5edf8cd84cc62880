#include "services/job/yaml_to_json.h"

#include <cstdlib>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/base/json_text.h"
#include "yaml-cpp/yaml.h"

namespace petra::job {
namespace {

absl::Status ErrorAt(const YAML::Mark& mark, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "YAML line ", mark.line + 1, ", column ", mark.column + 1, ": ", what));
}

// A plain scalar as JSON, by YAML 1.2's core schema.
std::string PlainScalar(const std::string& s) {
  static const std::regex kNull("null|Null|NULL|~|");
  static const std::regex kTrue("true|True|TRUE");
  static const std::regex kFalse("false|False|FALSE");
  static const std::regex kDecimal("[-+]?[0-9]+");
  static const std::regex kOctal("0o[0-7]+");
  static const std::regex kHex("0x[0-9a-fA-F]+");
  static const std::regex kFloat(
      "[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  static const std::regex kJsonNumber(
      "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?");
  static const std::regex kInf("[-+]?\\.(inf|Inf|INF)");
  static const std::regex kNan("\\.(nan|NaN|NAN)");
  if (std::regex_match(s, kNull)) return "null";
  if (std::regex_match(s, kTrue)) return "true";
  if (std::regex_match(s, kFalse)) return "false";
  if (std::regex_match(s, kOctal) || std::regex_match(s, kHex)) {
    return absl::StrCat(
        std::strtoull(s.c_str() + 2, nullptr, s[1] == 'o' ? 8 : 16));
  }
  if (std::regex_match(s, kDecimal) || std::regex_match(s, kFloat)) {
    // Keep the digits where JSON takes them as written ("+1", "007" and
    // ".5" it does not).
    if (std::regex_match(s, kJsonNumber)) return s;
    if (std::regex_match(s, kDecimal)) {
      const bool negative = s[0] == '-';
      const size_t digits = s.find_first_not_of("+-0");
      if (digits == std::string::npos) return "0";
      return absl::StrCat(negative ? "-" : "", s.substr(digits));
    }
    return absl::StrFormat("%.17g", std::strtod(s.c_str(), nullptr));
  }
  if (std::regex_match(s, kInf)) {
    return s[0] == '-' ? "\"-Infinity\"" : "\"Infinity\"";
  }
  if (std::regex_match(s, kNan)) return "\"NaN\"";
  return base::JsonString(s);
}

// A spec nests a few levels; deeper is hostile (the walk recurses).
constexpr int kMaxYamlDepth = 64;

absl::Status AppendJson(const YAML::Node& node, int depth, std::string* out) {
  if (depth > kMaxYamlDepth) {
    return ErrorAt(node.Mark(), absl::StrCat("nested deeper than ",
                                             kMaxYamlDepth, " levels"));
  }
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      absl::StrAppend(out, "null");
      return absl::OkStatus();
    case YAML::NodeType::Scalar:
      // "?" is a plain scalar's tag; a quoted one's is "!".
      absl::StrAppend(out, node.Tag() == "?" ? PlainScalar(node.Scalar())
                                             : base::JsonString(node.Scalar()));
      return absl::OkStatus();
    case YAML::NodeType::Sequence: {
      absl::StrAppend(out, "[");
      bool first = true;
      for (const YAML::Node& item : node) {
        if (!first) absl::StrAppend(out, ",");
        first = false;
        if (absl::Status s = AppendJson(item, depth + 1, out); !s.ok())
          return s;
      }
      absl::StrAppend(out, "]");
      return absl::OkStatus();
    }
    case YAML::NodeType::Map: {
      absl::StrAppend(out, "{");
      bool first = true;
      for (const auto& entry : node) {
        if (!entry.first.IsScalar()) {
          return ErrorAt(entry.first.Mark(), "a key must be a plain name");
        }
        if (!first) absl::StrAppend(out, ",");
        first = false;
        absl::StrAppend(out, base::JsonString(entry.first.Scalar()), ":");
        if (absl::Status s = AppendJson(entry.second, depth + 1, out); !s.ok())
          return s;
      }
      absl::StrAppend(out, "}");
      return absl::OkStatus();
    }
  }
  return ErrorAt(node.Mark(), "unknown node");
}

}  // namespace

absl::StatusOr<std::string> YamlToJson(const std::string& yaml) {
  // yaml-cpp reports errors by exception; none leaves this function.
  try {
    const std::vector<YAML::Node> docs = YAML::LoadAll(yaml);
    if (docs.size() > 1) {
      return ErrorAt(docs[1].Mark(),
                     "a job spec is one document (found a second after ---)");
    }
    if (docs.empty() || docs[0].IsNull()) return std::string("{}");
    if (!docs[0].IsMap()) {
      return ErrorAt(docs[0].Mark(), "a job spec is a mapping of fields");
    }
    std::string out;
    if (absl::Status s = AppendJson(docs[0], 0, &out); !s.ok()) return s;
    return out;
  } catch (const YAML::Exception& e) {
    return ErrorAt(e.mark, e.msg);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("YAML: ", e.what()));
  }
}

}  // namespace petra::job
