// A state file (torch.save's zip of a dict of named tensors) opened for
// reading record by record: its directory and its pickle are read when
// asked for the tensors, each tensor's bytes only when asked for them. What
// lets a coordinator check and merge stage files larger than it should
// hold, and a stage restore from a file without a second copy of it.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace caffe2::serialize {
class PyTorchStreamReader;
}

namespace petra::engine {

class StateFileReader {
 public:
  // INVALID_ARGUMENT when it is not a zip archive; NOT_FOUND when the file
  // is missing.
  static absl::StatusOr<std::unique_ptr<StateFileReader>> Open(
      const std::filesystem::path& file);
  // Over bytes in memory, which must outlive the reader.
  static absl::StatusOr<std::unique_ptr<StateFileReader>> OpenBytes(
      const std::string& bytes);
  ~StateFileReader();

  enum class Tensors { kLoaded, kDescribed };
  // The file's entries in its dictionary's order. kLoaded: each tensor with
  // its bytes. kDescribed: no tensor's bytes are read; each tensor has its
  // dtype, shape and strides over a storage that holds no data and names
  // its record (Record reads it). INVALID_ARGUMENT when it is not a
  // dictionary of named tensors.
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> Read(
      Tensors what);

  // The bytes of a described tensor's storage: (data, size). The reader
  // that described it must still be open. INVALID_ARGUMENT when `storage`
  // was not described by a StateFileReader.
  static absl::StatusOr<std::pair<at::DataPtr, size_t>> Record(
      const c10::Storage& storage);
  static bool IsDescribed(const c10::Storage& storage);

 private:
  explicit StateFileReader(
      std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive);
  // A reader over the archive `make_archive()` makes; INVALID_ARGUMENT
  // when it throws (not a zip archive).
  static absl::StatusOr<std::unique_ptr<StateFileReader>> Opened(
      const std::function<
          std::unique_ptr<caffe2::serialize::PyTorchStreamReader>()>&
          make_archive);

  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive_;
};

}  // namespace petra::engine
