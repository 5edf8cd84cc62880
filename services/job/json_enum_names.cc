#include "services/job/json_enum_names.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "services/job/enum_names.h"

namespace petra::job {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// A field by the key JSON may name it with: its proto name or its JSON
// (lowerCamel) name, as protobuf's parser takes both.
const FieldDescriptor* FieldByJsonKey(const Descriptor* type,
                                      const std::string& key) {
  if (const FieldDescriptor* f = type->FindFieldByName(key)) return f;
  for (int i = 0; i < type->field_count(); ++i) {
    if (type->field(i)->json_name() == key) return type->field(i);
  }
  return nullptr;
}

// Edits that turn `a` into `b` (Levenshtein): for "did you mean".
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean \"name\"?)" for the field of `type` nearest `key`, when
// one is near enough to be a typo; else "".
std::string Suggestion(const Descriptor* type, const std::string& key) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  for (int i = 0; i < type->field_count(); ++i) {
    const std::string& name = type->field(i)->name();
    const size_t d = EditDistance(key, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  return best.empty() ? "" : absl::StrCat(" (did you mean \"", best, "\"?)");
}

// A recursive-descent walk over JSON that knows, at each value, the field
// it fills. It records where enum strings are to be replaced and every
// unknown name; on a syntax error it stops, and the text is returned
// unchanged.
class Walker {
 public:
  explicit Walker(const std::string& in) : in_(in) {}

  std::string Expand(const Descriptor* type) {
    Space();
    if (!Object(type) || (Space(), pos_ != in_.size())) return in_;
    std::string out;
    size_t copied = 0;
    for (const auto& [begin, end, name] : replacements_) {
      out.append(in_, copied, begin - copied);
      out += name;
      copied = end;
    }
    out.append(in_, copied, std::string::npos);
    return out;
  }

  std::vector<std::string> Problems(const Descriptor* type) {
    Space();
    if (!Object(type) || (Space(), pos_ != in_.size())) return {};
    return problems_;
  }

 private:
  // Objects and arrays nest at most this deep here (the text is returned
  // unchanged beyond, for protobuf's parser and its own limit to judge):
  // the walk recurses, and a hostile spec must not exhaust the stack.
  static constexpr int kMaxDepth = 64;
  class Nesting {
   public:
    explicit Nesting(Walker* w) : w_(w) { ++w_->depth_; }
    ~Nesting() { --w_->depth_; }
    bool too_deep() const { return w_->depth_ > kMaxDepth; }

   private:
    Walker* w_;
  };

  struct Replacement {
    size_t begin, end;  // the string's contents, quotes excluded
    std::string name;
  };

  void Space() {
    while (pos_ < in_.size() &&
           std::isspace(static_cast<unsigned char>(in_[pos_])))
      ++pos_;
  }
  bool Eat(char c) {
    Space();
    if (pos_ < in_.size() && in_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // A string at pos_: [begin, end) are its raw contents (escapes kept).
  bool String(size_t* begin, size_t* end) {
    Space();
    if (pos_ >= in_.size() || in_[pos_] != '"') return false;
    *begin = ++pos_;
    while (pos_ < in_.size() && in_[pos_] != '"') {
      if (in_[pos_] == '\\') ++pos_;
      ++pos_;
    }
    if (pos_ >= in_.size()) return false;
    *end = pos_++;
    return true;
  }
  // An object of message `type` (nullptr: not a message we know).
  bool Object(const Descriptor* type) {
    Nesting nesting(this);
    if (nesting.too_deep() || !Eat('{')) return false;
    if (Eat('}')) return true;
    do {
      size_t begin, end;
      if (!String(&begin, &end) || !Eat(':')) return false;
      const std::string key = in_.substr(begin, end - begin);
      const FieldDescriptor* field = nullptr;
      const size_t path_size = path_.size();
      absl::StrAppend(&path_, path_.empty() ? "" : ".", key);
      if (type != nullptr) {
        field = FieldByJsonKey(type, key);
        if (field == nullptr) {
          problems_.push_back(
              absl::StrCat(path_, ": unknown field", Suggestion(type, key)));
        }
      }
      const bool ok = FieldValue(field);
      path_.resize(path_size);
      if (!ok) return false;
    } while (Eat(','));
    return Eat('}');
  }
  // The value of `field` (nullptr: unknown, walked without meaning).
  bool FieldValue(const FieldDescriptor* field) {
    Space();
    if (field != nullptr && field->is_map()) {
      return Object(nullptr);  // keys and values hold no enum of ours
    }
    if (field != nullptr && field->is_repeated() && pos_ < in_.size() &&
        in_[pos_] == '[') {
      return Array(field);
    }
    return Element(field);
  }
  // An array at pos_, each element a value of `field` (nullptr: unknown).
  bool Array(const FieldDescriptor* field) {
    Nesting nesting(this);
    if (nesting.too_deep() || !Eat('[')) return false;
    if (Eat(']')) return true;
    const size_t path_size = path_.size();
    int index = 0;
    do {
      absl::StrAppend(&path_, "[", index++, "]");
      const bool ok = Element(field);
      path_.resize(path_size);
      if (!ok) return false;
    } while (Eat(','));
    return Eat(']');
  }
  // One value of `field` (one element, for a repeated field).
  bool Element(const FieldDescriptor* field) {
    Space();
    if (pos_ >= in_.size()) return false;
    const char c = in_[pos_];
    if (c == '{') {
      return Object(field != nullptr &&
                            field->type() == FieldDescriptor::TYPE_MESSAGE
                        ? field->message_type()
                        : nullptr);
    }
    if (c == '[') return Array(nullptr);
    if (c == '"') {
      size_t begin, end;
      if (!String(&begin, &end)) return false;
      if (field != nullptr && field->type() == FieldDescriptor::TYPE_ENUM) {
        const std::string text = in_.substr(begin, end - begin);
        const auto* type = field->enum_type();
        if (type->FindValueByName(text) == nullptr) {
          absl::StatusOr<int> number = ParseEnumShortName(type, text, path_);
          if (number.ok()) {
            replacements_.push_back(
                {begin, end, type->FindValueByNumber(*number)->name()});
          } else {
            problems_.emplace_back(number.status().message());
          }
        }
      }
      return true;
    }
    // A number, true, false or null.
    const size_t start = pos_;
    while (pos_ < in_.size() && in_[pos_] != ',' && in_[pos_] != '}' &&
           in_[pos_] != ']' &&
           !std::isspace(static_cast<unsigned char>(in_[pos_]))) {
      ++pos_;
    }
    return pos_ > start;
  }

  const std::string& in_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<Replacement> replacements_;
  std::string path_;  // of the value being read: "training.epochs"
  std::vector<std::string> problems_;
};

}  // namespace

std::string ExpandShortEnumNames(const std::string& json,
                                 const google::protobuf::Descriptor* type) {
  return Walker(json).Expand(type);
}

std::vector<std::string> UnknownNamesInJson(
    const std::string& json, const google::protobuf::Descriptor* type) {
  return Walker(json).Problems(type);
}

}  // namespace petra::job
