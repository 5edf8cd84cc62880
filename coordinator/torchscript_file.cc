#include "coordinator/torchscript_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "services/cli/durable_file.h"
#include "services/data/dataset.h"
#include "services/engine/state_file.h"
#include "services/engine/torchscript_export.h"
#include "services/model/architecture_catalog.h"

namespace petra::coordinator {

namespace fs = std::filesystem;

absl::StatusOr<std::string> TorchScriptFile(const JobLayout& layout,
                                            const petra::v1::JobSpec& resolved,
                                            const std::string& data_root) {
  const fs::path plain = layout.export_file();
  const fs::path script = layout.torchscript_file();
  std::error_code ec;
  // The TorchScript file carries its source's modification time: equal
  // times mean it was made from this very export.
  const fs::file_time_type source_time = fs::last_write_time(plain, ec);
  if (ec) {
    return absl::DataLossError(
        absl::StrCat("the export file cannot be read: ", ec.message()));
  }
  if (fs::exists(script, ec) &&
      fs::last_write_time(script, ec) == source_time && !ec) {
    return script.string();
  }
  std::ifstream in(plain, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in) return absl::DataLossError("the export file cannot be read");
  absl::StatusOr<engine::NamedTensors> tensors =
      engine::DecodeStateFile(bytes.str());
  if (!tensors.ok()) return tensors.status();

  // The normalisation evaluation applied: the statistics of the job's data
  // as it loaded them (limits included), or none.
  engine::TorchScriptInput input;
  if (resolved.dataset().augmentation().normalize()) {
    absl::StatusOr<data::Splits> data = data::LoadForJob(
        resolved, data_root, model::InputShape(resolved.model().variant()));
    if (!data.ok()) {
      return absl::Status(
          data.status().code(),
          absl::StrCat("loading the data for its normalisation: ",
                       data.status().message()));
    }
    input.mean = data->test.mean;
    input.std = data->test.std;
  }
  absl::StatusOr<std::string> module =
      engine::EncodeTorchScript(resolved, *tensors, input);
  if (!module.ok()) return module.status();
  if (absl::Status s = cli::WriteFileAtomically(script, *module); !s.ok()) {
    return s;
  }
  fs::last_write_time(script, source_time, ec);
  return script.string();
}

}  // namespace petra::coordinator
