#include "services/engine/state_file_reader.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "services/engine/torch_guard.h"

namespace petra::engine {
namespace {

// Bytes in memory as the archive's input.
class BytesAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesAdapter(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n,
              const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// What a described storage holds instead of data: which archive and record
// its bytes are in. Its deleter tells it from every other storage.
struct RecordRef {
  caffe2::serialize::PyTorchStreamReader* archive;
  std::string record;
};
void DeleteRecordRef(void* ref) { delete static_cast<RecordRef*>(ref); }

const RecordRef* RefOf(const c10::Storage& storage) {
  const at::DataPtr& ptr = storage.data_ptr();
  if (ptr.get_deleter() != &DeleteRecordRef) return nullptr;
  return static_cast<const RecordRef*>(ptr.get_context());
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateFileReader>> StateFileReader::Opened(
    const std::function<
        std::unique_ptr<caffe2::serialize::PyTorchStreamReader>()>&
        make_archive) {
  try {
    return std::unique_ptr<StateFileReader>(
        new StateFileReader(make_archive()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("state file: not a torch.save archive (", e.what(), ")"));
  }
}

StateFileReader::StateFileReader(
    std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive)
    : archive_(std::move(archive)) {}
StateFileReader::~StateFileReader() = default;

absl::StatusOr<std::unique_ptr<StateFileReader>> StateFileReader::Open(
    const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    return absl::NotFoundError(
        absl::StrCat(file.filename().string(), " is missing"));
  }
  return Opened([&] {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(
        file.string());
  });
}

absl::StatusOr<std::unique_ptr<StateFileReader>> StateFileReader::OpenBytes(
    const std::string& bytes) {
  return Opened([&] {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(
        std::make_shared<BytesAdapter>(bytes));
  });
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>>
StateFileReader::Read(Tensors what) {
  try {
    // Not a structured binding: C++17 lambdas cannot capture one (clang).
    auto pickle = archive_->getRecord("data.pkl");
    const size_t pickle_size = std::get<1>(pickle);
    const char* data = static_cast<const char*>(std::get<0>(pickle).get());
    size_t at = 0;
    auto reader = [&](char* buf, size_t n) {
      n = std::min(n, pickle_size - at);
      std::memcpy(buf, data + at, n);
      at += n;
      return n;
    };
    caffe2::serialize::PyTorchStreamReader* archive = archive_.get();
    auto read_record = [&](const std::string& key) -> at::DataPtr {
      const std::string record = "data/" + key;
      if (what == Tensors::kLoaded) {
        return std::move(std::get<0>(archive->getRecord(record)));
      }
      // Checked here, so that a described file is known whole.
      if (!archive->hasRecord(record)) {
        throw std::runtime_error("record " + record + " is missing");
      }
      return at::DataPtr(nullptr, new RecordRef{archive, record},
                         &DeleteRecordRef, at::Device(at::kCPU));
    };
    torch::jit::TypeResolver no_types;
    torch::jit::ObjLoader no_objects;
    torch::jit::Unpickler unpickler(reader, no_types, no_objects, read_record,
                                    at::Device(at::kCPU));
    unpickler.set_version(archive_->version());
    const c10::IValue v = unpickler.parse_ivalue();
    if (!v.isGenericDict()) {
      return absl::InvalidArgumentError(
          "state file: not a dictionary of tensors");
    }
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& entry : v.toGenericDict()) {
      if (!entry.key().isString() || !entry.value().isTensor()) {
        return absl::InvalidArgumentError(
            "state file: an entry is not a name and a tensor");
      }
      out.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
    }
    return out;
  } catch (const std::exception& e) {
    return TorchError(
        e, "state file: unreadable: ", absl::StatusCode::kInvalidArgument);
  }
}

bool StateFileReader::IsDescribed(const c10::Storage& storage) {
  return RefOf(storage) != nullptr;
}

absl::StatusOr<std::pair<at::DataPtr, size_t>> StateFileReader::Record(
    const c10::Storage& storage) {
  const RecordRef* ref = RefOf(storage);
  if (ref == nullptr) {
    return absl::InvalidArgumentError("state file: not a described storage");
  }
  try {
    auto [data, size] = ref->archive->getRecord(ref->record);
    return std::make_pair(std::move(data), size);
  } catch (const std::exception& e) {
    return TorchError(e, absl::StrCat("state file: record ", ref->record, ": "),
                      absl::StatusCode::kDataLoss);
  }
}

}  // namespace petra::engine
