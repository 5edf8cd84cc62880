#include "coordinator/torchscript_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "services/base/durable_file.h"
#include "services/catalog/architecture_catalog.h"
#include "services/data/dataset.h"
#include "services/engine/export_input.h"
#include "services/engine/state_file.h"
#include "services/engine/torchscript_export.h"

namespace petra::coordinator {

namespace fs = std::filesystem;

absl::StatusOr<std::string> TorchScriptFile(const JobLayout& layout,
                                            const petra::v1::Job& job,
                                            const std::string& data_root) {
  const petra::v1::JobSpec& resolved = job.spec();
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
  absl::StatusOr<engine::NamedTensors> tensors = engine::ReadStateFile(plain);
  if (!tensors.ok()) return tensors.status();

  // An export of an earlier version has no input.* tensors: its record's,
  // or (a record as old) the job's data again.
  if (engine::PreprocessingFromTensors(*tensors).status().code() ==
      absl::StatusCode::kNotFound) {
    petra::v1::Preprocessing input = job.preprocessing();
    if (input.input_shape_size() == 0) {
      const std::vector<int64_t> chw =
          catalog::InputShape(resolved.model().variant());
      absl::StatusOr<data::Splits> data =
          data::LoadForJob(resolved, data_root, chw);
      if (!data.ok()) {
        return absl::Status(
            data.status().code(),
            absl::StrCat("this export predates its input.* tensors, and "
                         "loading the data for its normalisation failed: ",
                         data.status().message()));
      }
      input = data::PreprocessingOf(resolved, *data, chw);
    }
    for (auto& [name, t] : engine::InputTensors(input)) (*tensors)[name] = t;
  }
  absl::StatusOr<std::string> module =
      engine::EncodeTorchScript(resolved, *tensors);
  if (!module.ok()) return module.status();
  if (absl::Status s = base::WriteFileAtomically(script, *module); !s.ok()) {
    return s;
  }
  fs::last_write_time(script, source_time, ec);
  return script.string();
}

}  // namespace petra::coordinator
