#include "services/base/proto_json.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace petra::base {
namespace {

class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) {
      first_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ",
                            message);
    }
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

std::string ProtoToJson(const google::protobuf::Message& message,
                        ProtoJsonOptions options) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = options.pretty;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = options.all_fields;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, o).ok()) {
    return "{}";
  }
  if (!options.pretty && !json.empty() && json.back() == '\n') json.pop_back();
  return json;
}
absl::Status ParseTextProto(const std::string& text,
                            google::protobuf::Message* message,
                            const std::string& what) {
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, message)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", errors.first()));
  }
  return absl::OkStatus();
}

}  // namespace petra::base
