#include "coordinator/train_log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/base/durable_file.h"

namespace petra::coordinator {

absl::Status TrainLog::Append(
    uint32_t epoch, uint64_t steps_before, uint64_t k,
    std::vector<std::pair<int64_t, double>> losses) const {
  std::error_code ec;
  const bool fresh = !std::filesystem::exists(path_, ec);
  std::ofstream out(path_, std::ios::app);
  if (fresh) out << "epoch,micro_batch,step,loss\n";
  std::sort(losses.begin(), losses.end());
  for (const auto& [id, loss] : losses) {
    out << epoch << "," << id << "," << steps_before + id / k << ","
        << absl::StrFormat("%.9g", loss) << "\n";
  }
  out.flush();
  if (!out) {
    // errno says why (a full disk, above all).
    return absl::InternalError(absl::StrCat("cannot write ", path_.string(),
                                            ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TrainLog::Trim(uint32_t epochs) const {
  std::ifstream in(path_);
  if (!in) return absl::OkStatus();
  std::string kept, line;
  bool trimmed = false;
  while (std::getline(in, line)) {
    uint32_t epoch = 0;
    const bool row = absl::SimpleAtoi(line.substr(0, line.find(',')), &epoch);
    if (row && epoch > epochs) {
      trimmed = true;
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  if (!trimmed) return absl::OkStatus();
  return base::WriteFileAtomically(path_, kept);
}

}  // namespace petra::coordinator
