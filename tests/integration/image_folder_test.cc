// Image folders through the fleet: a folder of JPEGs and PNGs of two sizes
// (written with Pillow), streamed by the coordinator; a corrupt file under
// each policy; and a stage killed mid-epoch, after which the job trains on
// in the same data order as a run that was never interrupted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/subprocess.h"

namespace petra::testing {
namespace {

// Three classes of noisy colour patches, `per_class` training images each;
// every third image a JPEG, sizes 64x64 and 48x40; with `corrupt`, one
// training PNG cut short.
void MakeFolder(const std::string& root, bool corrupt, int per_class) {
  RunResult py = RunToExit(
      "/usr/bin/python3",
      {"-c",
       "import os, random, sys\n"
       "from PIL import Image\n"
       "random.seed(1)\n"
       "root = sys.argv[1]\n"
       "colours = [(200, 40, 40), (40, 200, 40), (40, 40, 200)]\n"
       "for split, n in (('train', int(sys.argv[3])), ('test', 16)):\n"
       "  for c, col in enumerate(colours):\n"
       "    d = os.path.join(root, split, 'class%d' % c)\n"
       "    os.makedirs(d, exist_ok=True)\n"
       "    for i in range(n):\n"
       "      size = (48, 40) if i % 2 else (64, 64)\n"
       "      im = Image.new('RGB', size, tuple(\n"
       "          max(0, min(255, v + random.randint(-60, 60))) for v in "
       "col))\n"
       "      im.save(os.path.join(d, '%03d.%s' % (i, 'jpg' if i % 3 == 0\n"
       "                                           else 'png')))\n"
       "if sys.argv[2] == '1':\n"
       "  p = os.path.join(root, 'train', 'class1', '004.png')\n"
       "  data = open(p, 'rb').read()\n"
       "  open(p, 'wb').write(data[:len(data) // 2])\n",
       root, corrupt ? "1" : "0", std::to_string(per_class)});
  ASSERT_EQ(py.exit_code, 0) << py.err;
}

std::vector<std::string> FolderJob(const std::string& root, int epochs,
                                   const std::string& policy) {
  return {"--arch",           "revnet18",
          "--width",          "0.125",
          "--dataset",        "image_folder",
          "--data-path",      root,
          "--micro-batch",    "16",
          "--stages",         "2",
          "--epochs",         std::to_string(epochs),
          "--seed",           "7",
          "--corrupt-images", policy};
}

using ImageFolderFleet = FleetProcesses;

TEST_F(ImageFolderFleet, ACorruptFileFailsTheJobNamingItOrIsSkipped) {
  const std::string root = dir_.path() + "/images";
  MakeFolder(root, /*corrupt=*/true, 64);
  StartStages(2);
  StartCoordinator(5, {"--data-root", "/", "--data-workers", "2"});
  const std::string failing = Submit(FolderJob(root, 1, "fail"));
  petra::v1::Job job = WaitForTheEnd(failing, std::chrono::seconds(120));
  EXPECT_EQ(job.state(), petra::v1::JOB_STATE_FAILED) << job.DebugString();
  EXPECT_THAT(job.error().message(), HasSubstr(root + "/train/class1/004.png"));
  EXPECT_THAT(job.error().message(), HasSubstr("not a valid PNG"));

  const std::string skipping = Submit(FolderJob(root, 1, "skip"));
  job = WaitForTheEnd(skipping, std::chrono::seconds(120));
  EXPECT_EQ(job.state(), petra::v1::JOB_STATE_SUCCEEDED) << job.DebugString();
  EXPECT_GT(job.progress().test_accuracy(), 0.6);
  // No --num-classes: the coordinator counted the folder's three classes
  // (a new user's job got the default 10).
  EXPECT_EQ(job.spec().model().num_classes(), 3u);
  // Counted once, though it comes up twice: in the pass that measures the
  // normalisation, then in the one epoch (counted 2 before).
  EXPECT_EQ(job.progress().corrupt_images_skipped(), 1u) << job.DebugString();
  // Named in the coordinator's log (stderr) once it stops.
  coordinator_->SignalAndWait(SIGTERM, std::chrono::seconds(30));
  EXPECT_THAT(coordinator_->err(), HasSubstr("image folder: skipping " + root +
                                             "/train/class1/004.png"));
}

TEST_F(ImageFolderFleet, AStageKilledMidEpochResumesTheSameDataOrder) {
  const std::string root = dir_.path() + "/images";
  // Epochs of 48 micro-batches: seconds each, long enough to kill a stage
  // in the middle of one.
  MakeFolder(root, /*corrupt=*/false, 256);
  StartStages(2);
  StartCoordinator(120, {"--data-root", "/"});
  const std::string whole = Submit(FolderJob(root, 3, "fail"));
  petra::v1::Job done = WaitForTheEnd(whole, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();

  const std::string id = Submit(FolderJob(root, 3, "fail"));
  // Into epoch 2: its checkpoint of epoch 1 is written, epoch 2 trains.
  const auto end = Clock::now() + std::chrono::seconds(120);
  petra::v1::Job j = GetJob(id);
  while (Clock::now() < end &&
         !absl::EndsWith(j.last_checkpoint(), "/epoch-1")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    j = GetJob(id);
  }
  ASSERT_EQ(j.state(), petra::v1::JOB_STATE_RUNNING) << j.DebugString();
  const std::string address = stage_addresses_[1];
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  ASSERT_EQ(stages_[1]->SignalAndWait(SIGKILL, std::chrono::seconds(10)), -1);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  StartStage(1, port);
  done = WaitForTheEnd(id, std::chrono::seconds(300));
  ASSERT_EQ(done.state(), petra::v1::JOB_STATE_SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.recoveries_size(), 1) << done.DebugString();
  EXPECT_EQ(done.recoveries(0).restored_epoch(), 1u);
  // The same micro-batches in the same order give the same losses.
  const auto a = Losses(whole), b = Losses(id);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, loss] : a) {
    ASSERT_EQ(b.count(key), 1u) << key.first << "/" << key.second;
    EXPECT_NEAR(b.at(key), loss, 1e-5 * std::max(1.0, std::abs(loss)))
        << "epoch " << key.first << ", micro-batch " << key.second;
  }
  EXPECT_NEAR(done.progress().test_accuracy(),
              GetJob(whole).progress().test_accuracy(), 1e-9);
}

}  // namespace
}  // namespace petra::testing
