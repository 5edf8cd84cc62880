#include "services/base/proto_json.h"

#include "google/protobuf/util/json_util.h"

namespace petra::base {

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

}  // namespace petra::base
