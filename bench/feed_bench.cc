// petra_bench_feed: how fast the coordinator's feed turns an image folder
// into training micro-batches (read, decode, random resized crop, flip,
// normalise: what it does before sending), against --data-workers, and
// the memory it holds while doing so. Writes its own folder of JPEGs.
#include <sys/resource.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "services/base/crash_report.h"
#include "services/base/flag_set.h"
#include "services/base/paths.h"
#include "services/catalog/architecture_catalog.h"
#include "services/data/batches.h"
#include "services/data/dataset.h"
#include "services/data/test_images.h"
#include "services/engine/job_plan.h"
#include "services/job/job_spec_validation.h"

namespace petra {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

int64_t RssBytes(const char* field) {  // VmRSS or VmHWM, from /proc
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      return std::stoll(line.substr(line.find_first_of("0123456789"))) * 1024;
    }
  }
  return 0;
}

// `n` JPEGs of side x side in 3 classes: smooth colour gradients with
// noise, quality 90 (photo-like sizes, ~20-40 KB at 256).
void WriteImages(const fs::path& root, int n, int side) {
  torch::manual_seed(1);
  for (int i = 0; i < n; ++i) {
    torch::Tensor img = (torch::linspace(0, 1, side).view({side, 1, 1}) *
                             torch::rand({1, 1, 3}) * 200 +
                         torch::rand({side, side, 3}) * 55)
                            .to(torch::kUInt8)
                            .contiguous();
    std::vector<uint8_t> pixels(img.data_ptr<uint8_t>(),
                                img.data_ptr<uint8_t>() + img.numel());
    data::WriteFile(root / "train" / ("c" + std::to_string(i % 3)) /
                        (std::to_string(i) + ".jpg"),
                    data::EncodeJpeg(pixels, side, side, 3, 90));
  }
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(root / "test" / ("c" + std::to_string(c)));
    fs::copy_file(root / "train" / ("c" + std::to_string(c)) /
                      (std::to_string(c) + ".jpg"),
                  root / "test" / ("c" + std::to_string(c)) / "0.jpg",
                  fs::copy_options::overwrite_existing);
  }
}

int Main(int argc, char** argv) {
  int64_t images = 1024, side = 256, batch = 64;
  std::string workers_list = "1,2", dir, fleet_rates = "1000,3000,10000";
  base::FlagSet flags(
      "petra_bench_feed [--images N] [--side PX] [--workers 1,2]",
      "Times the image-folder feed (decode, random resized crop to 224x224,\n"
      "flip, normalise) over generated JPEGs, for each data-worker count.");
  flags.AddInt("images", &images, "JPEGs to generate");
  flags.AddInt("side", &side, "their side in pixels");
  flags.AddInt("micro-batch", &batch, "samples per micro-batch");
  flags.AddString("workers", &workers_list, "data-worker counts to time");
  flags.AddString("fleet-rates", &fleet_rates,
                  "training rates (images/s) to size the coordinator's "
                  "cores for, from the rate of one worker");
  flags.AddString("dir", &dir, "where to write them (default: a temp dir)");
  if (int rc = base::ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  std::vector<int> workers;
  for (absl::string_view w : absl::StrSplit(workers_list, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(w, &v) || v < 1 || v > data::kMaxDataWorkers) {
      std::cerr << "petra_bench_feed: --workers: \"" << w
                << "\" is not a count in [1, " << data::kMaxDataWorkers
                << "]\n";
      return 2;
    }
    workers.push_back(v);
  }
  std::vector<double> rates;
  for (absl::string_view r : absl::StrSplit(fleet_rates, ',')) {
    double v = 0;
    if (!absl::SimpleAtod(r, &v) || !(v > 0)) {
      std::cerr << "petra_bench_feed: --fleet-rates: \"" << r
                << "\" is not a rate in images/s above 0\n";
      return 2;
    }
    rates.push_back(v);
  }
  if (images < 3 * batch || side < 16 || side > 4096 || batch < 1) {
    std::cerr << "petra_bench_feed: need --images >= 3 x --micro-batch, "
                 "--side in [16, 4096]\n";
    return 2;
  }
  const bool temporary = dir.empty();
  if (temporary) {
    char tmpl[] = "/tmp/petra-feed-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  const auto t0 = Clock::now();
  WriteImages(dir, static_cast<int>(images), static_cast<int>(side));
  uint64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  std::printf(
      "%lld generated %lldx%lld JPEGs (%.1f KB each) in %.1f s; variant "
      "imagenet (224x224x3), micro-batch %lld, training transform (random "
      "resized crop, flip, normalise)\n\n",
      static_cast<long long>(images), static_cast<long long>(side),
      static_cast<long long>(side), bytes / 1024.0 / images,
      std::chrono::duration<double>(Clock::now() - t0).count(),
      static_cast<long long>(batch));

  petra::v1::JobSpec spec;
  spec.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  spec.mutable_model()->set_variant(petra::v1::VARIANT_IMAGENET);
  spec.mutable_model()->set_num_classes(3);
  spec.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_IMAGE_FOLDER);
  spec.mutable_dataset()->set_path(dir);
  auto* f = spec.mutable_dataset()->mutable_image_folder();
  for (double m : {0.4, 0.4, 0.4}) f->add_mean(m);  // no measuring pass
  for (double s : {0.25, 0.25, 0.25}) f->add_std(s);
  spec.mutable_training()->set_micro_batch_size(batch);
  absl::StatusOr<petra::v1::JobSpec> resolved = job::ResolveJobSpec(spec);
  if (!resolved.ok()) {
    std::cerr << "petra_bench_feed: " << resolved.status().message() << "\n";
    return 1;
  }
  std::printf(
      "| data workers | images/s | micro-batches | seconds | RSS growth | "
      "peak RSS |\n|---:|---:|---:|---:|---:|---:|\n");
  double per_worker = 0;  // images/s of the first count, per worker
  for (int w : workers) {
    const int64_t rss0 = RssBytes("VmRSS:");
    data::LoadOptions load;
    load.data_workers = w;
    absl::StatusOr<data::Splits> splits = data::LoadForJob(
        *resolved, "/", catalog::InputShape(petra::v1::VARIANT_IMAGENET), load);
    if (!splits.ok()) {
      std::cerr << "petra_bench_feed: " << splits.status().message() << "\n";
      return 1;
    }
    data::EpochBatches epoch(splits->train,
                             engine::TrainBatchOptions(*resolved), 0);
    int64_t grown = 0;
    const auto start = Clock::now();
    for (int64_t i = 0; i < epoch.size(); ++i) {
      absl::StatusOr<data::Batch> b = epoch.Get(i);
      if (!b.ok()) {
        std::cerr << "petra_bench_feed: " << b.status().message() << "\n";
        return 1;
      }
      grown = std::max(grown, RssBytes("VmRSS:") - rss0);
    }
    const double s =
        std::chrono::duration<double>(Clock::now() - start).count();
    const double rate = epoch.size() * batch / s;
    if (per_worker == 0) per_worker = rate / w;
    std::printf("| %d | %.1f | %lld | %.2f | %.1f MB | %.1f MB |\n", w, rate,
                static_cast<long long>(epoch.size()), s, grown / 1e6,
                RssBytes("VmHWM:") / 1e6);
  }
  // Each worker is one core's work (image_folder.cc), so the first row's
  // rate per worker is a core's. A pipeline takes each image in once, at
  // the rate the whole fleet trains.
  std::printf(
      "\nOne core feeds %.0f images/s. Cores the coordinator needs so that "
      "the feed keeps up with a fleet training at:\n\n"
      "| fleet images/s | cores |\n|---:|---:|\n",
      per_worker);
  for (double rate : rates) {
    if (per_worker <= 0) break;
    std::printf("| %.0f | %.0f |\n", rate, std::ceil(rate / per_worker));
  }
  if (temporary) petra::base::RemoveTree(dir).IgnoreError();
  return 0;
}

}  // namespace
}  // namespace petra

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  return petra::Main(argc, argv);
}
