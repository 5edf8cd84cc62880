#include "services/job/json_enum_names.h"

#include <cctype>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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

// A recursive-descent walk over JSON that knows, at each value, the field
// it fills. It only records where enum strings are to be replaced; on a
// syntax error it stops, and the text is returned unchanged.
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
      if (type != nullptr) {
        field = FieldByJsonKey(type, key);
      }
      if (!FieldValue(field)) return false;
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
    do {
      if (!Element(field)) return false;
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
          absl::StatusOr<int> number = ParseEnumShortName(type, text, "");
          if (number.ok()) {
            replacements_.push_back(
                {begin, end, type->FindValueByNumber(*number)->name()});
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
};

}  // namespace

std::string ExpandShortEnumNames(const std::string& json,
                                 const google::protobuf::Descriptor* type) {
  return Walker(json).Expand(type);
}

}  // namespace petra::job
