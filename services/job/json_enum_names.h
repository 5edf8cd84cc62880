// Short enum names in JSON job specs: the flags take `--dataset
// image_folder`, so a JSON spec (and petra.Client's dicts) may say
// "kind": "image_folder" too, not only "DATASET_KIND_IMAGE_FOLDER".
#pragma once

#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"

namespace petra::job {

// `json` with every enum field's string value that is a short name (as
// ParseEnumShortName reads them: any case, '-' or '_') replaced by the
// value's full name; every other byte kept, so protobuf's JSON parser still
// judges the text (a syntax error comes back unchanged for it to report).
// `type` is the message the text encodes.
std::string ExpandShortEnumNames(const std::string& json,
                                 const google::protobuf::Descriptor* type);

// Every unknown field and every unknown enum name in `json`, each with its
// path ("training.epoch: unknown field (did you mean \"epochs\"?)"), in the
// order they appear: protobuf's parser stops at the first, and a user with
// two typos should not have to submit twice. Empty when the text does not
// parse as JSON (the parser's own error says where).
std::vector<std::string> UnknownNamesInJson(
    const std::string& json, const google::protobuf::Descriptor* type);

}  // namespace petra::job
