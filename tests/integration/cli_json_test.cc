// The client as scripts use it: connection defaults from the environment,
// --json on every command, and names with quotes, backslashes and
// non-ASCII text that come back unchanged through every JSON output
// (checked by Python's json module, a parser that is not ours).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/subprocess.h"

namespace petra::testing {
namespace {

// A quote, a backslash, é, a snowman and a clef (4 UTF-8 bytes).
const std::string kAwkwardName =
    "run \"A\" \\ b c caf\xC3\xA9 \xE2\x98\x83 \xF0\x9D\x84\x9E";

class ClientJson : public FleetProcesses {
 protected:
  // `petra ARGS` with the coordinator named only by PETRA_COORDINATOR.
  RunResult PetraFromEnv(const std::vector<std::string>& args) {
    std::vector<std::string> env_args = {"PETRA_COORDINATOR=" + address_,
                                         kPetra};
    env_args.insert(env_args.end(), args.begin(), args.end());
    return RunToExit("/usr/bin/env", env_args, std::chrono::seconds(300));
  }

  // Runs a Python check on `text` (saved to a file): `check` reads `doc`
  // (json.loads of the whole text) or `lines` (json.loads of each line)
  // and `name`, the expected name.
  void CheckJson(const std::string& what, const std::string& text,
                 const std::string& check) {
    const std::string path = dir_.path() + "/" + what + ".json";
    std::ofstream(path, std::ios::binary) << text;
    const std::string name_path = dir_.path() + "/name.txt";
    std::ofstream(name_path, std::ios::binary) << kAwkwardName;
    RunResult py = RunToExit(
        "/usr/bin/python3",
        {"-c",
         "import json, sys\n"
         "text = open(sys.argv[1], encoding='utf-8').read()\n"
         "name = open(sys.argv[2], encoding='utf-8').read()\n"
         "try:\n"
         "  doc = json.loads(text)\n"
         "except ValueError:\n"
         "  doc = None  # JSON lines\n"
         "lines = [doc] if doc is not None else [\n"
         "  json.loads(l) for l in text.splitlines() if l.strip()]\n" +
             check + "\nprint('ok')\n",
         path, name_path});
    EXPECT_EQ(py.exit_code, 0) << what << ":\n" << text << "\n" << py.err;
    EXPECT_THAT(py.out, HasSubstr("ok")) << what;
  }
};

TEST_F(ClientJson, EveryCommandPrintsValidJsonAndNamesRoundTrip) {
  StartStages(2);
  StartCoordinator();
  std::vector<std::string> submit = {"submit", "--json", "--watch", "--name",
                                     kAwkwardName};
  const std::vector<std::string> job = SmallJob(1);
  submit.insert(submit.end(), job.begin(), job.end());
  RunResult r = PetraFromEnv(submit);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // JSON lines: the submitted Job, then JobEvents, the last the final Job.
  CheckJson("submit-watch", r.out,
            "assert len(lines) >= 3, lines\n"
            "assert lines[0]['spec']['name'] == name, lines[0]\n"
            "assert all('kind' in e and 'job' in e for e in lines[1:])\n"
            "assert lines[-1]['job']['state'] == 'JOB_STATE_SUCCEEDED'\n"
            "assert lines[-1]['job']['spec']['name'] == name\n"
            "assert any(e['kind'] == 'KIND_EPOCH_END' for e in lines[1:])");
  const std::string id = r.out.substr(r.out.find("\"id\":\"") + 6, 5);
  ASSERT_EQ(id, "job-1") << r.out;

  r = PetraFromEnv({"watch", "--json", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CheckJson("watch", r.out,
            "assert lines[-1]['job']['spec']['name'] == name, lines[-1]");

  r = PetraFromEnv({"status", "--json", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CheckJson("status", r.out,
            "assert doc['spec']['name'] == name and doc['id'] == 'job-1'");

  r = PetraFromEnv({"list", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CheckJson("list", r.out,
            "assert [j['spec']['name'] for j in doc['jobs']] == [name], doc");
  r = PetraFromEnv({"list", "--json", "--state", "running"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CheckJson("list-none", r.out, "assert doc == {'jobs': []}, doc");

  // An output path with the same characters.
  const std::string exported = dir_.path() + "/" + kAwkwardName + ".pt";
  r = PetraFromEnv({"export", "--json", "--output", exported, id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  CheckJson("export", r.out,
            "assert doc['job'] == 'job-1' and doc['path'].endswith(name + "
            "'.pt')\n"
            "assert doc['bytes'] == " +
                std::to_string(std::filesystem::file_size(exported)));

  // The TorchScript export loads with torch.jit.load and no petra code.
  r = PetraFromEnv({"export", "--json", "--format", "torchscript", "--output",
                    dir_.path() + "/model.torchscript.pt", id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  CheckJson("export-torchscript", r.out,
            "import torch\n"
            "assert doc['path'].endswith('/model.torchscript.pt'), doc\n"
            "m = torch.jit.load(doc['path'])\n"
            "assert m(torch.rand(2, 3, 32, 32)).shape == (2, 10)");
  // What a new user saw: "cannot write \"out/model.pt.partial\"", a file
  // they never named, and no reason.
  r = PetraFromEnv(
      {"export", "--output", dir_.path() + "/no-such-dir/m.pt", id});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot write \"" + dir_.path() +
                               "/no-such-dir/m.pt\": No such file or "
                               "directory"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr(".partial")));
  r = PetraFromEnv({"export", "--format", "onnx", id});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--format: \"onnx\" is not state_dict or "
                               "torchscript"));

  // A queued job, cancelled.
  const std::string busy = Submit(SmallJob(50));
  const std::string queued = Submit(SmallJob(1));
  r = PetraFromEnv({"cancel", "--json", queued});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CheckJson("cancel", r.out,
            "assert doc['state'] == 'JOB_STATE_CANCELLED', doc");
  EXPECT_EQ(PetraFromEnv({"cancel", busy}).exit_code, 0);

  // A flag beats the environment.
  r = RunToExit("/usr/bin/env", {"PETRA_COORDINATOR=nohost", kPetra, "list",
                                 "--coordinator", address_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunToExit("/usr/bin/env", {"PETRA_COORDINATOR=nohost", kPetra, "list"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--coordinator"));
  r = RunToExit("/usr/bin/env", {"PETRA_COORDINATOR=" + address_,
                                 "PETRA_TLS_CA=/no/ca.pem", kPetra, "list"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("/no/ca.pem"));
}

TEST(PetraTrainReport, IsOneJsonObjectWhateverTheName) {
  TempDir dir;
  const std::string report = dir.path() + "/report.json";
  std::vector<std::string> args = {
      "train", "--runner", "in-process", "--quiet",  "--report",
      report,  "--name",   kAwkwardName, "--output", dir.path() + "/m.pt"};
  const std::vector<std::string> job = SmallJob(1);
  args.insert(args.end(), job.begin(), job.end());
  RunResult r = RunToExit(kPetra, args, std::chrono::seconds(300));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ofstream(dir.path() + "/name.txt", std::ios::binary) << kAwkwardName;
  RunResult py = RunToExit(
      "/usr/bin/python3",
      {"-c",
       "import json, sys\n"
       "doc = json.load(open(sys.argv[1], encoding='utf-8'))\n"
       "name = open(sys.argv[2], encoding='utf-8').read()\n"
       "assert doc['name'] == name, doc['name']\n"
       "assert doc['runner'] == 'in-process' and doc['state'] == 'succeeded'\n"
       "assert isinstance(doc['optimizer_steps'], int)\n"
       "assert len(doc['stages']) == 2 and len(doc['epochs']) == 1\n"
       "assert [s['transport_to_next'] for s in doc['stages']] == "
       "[None, None]\n"
       "assert doc['model'].endswith('/m.pt'), doc['model']\n"
       "print('ok')\n",
       report, dir.path() + "/name.txt"});
  EXPECT_EQ(py.exit_code, 0) << py.err;
  EXPECT_THAT(py.out, HasSubstr("ok"));
}

// Both runners build an epoch's progress in one place (ProgressBuilder):
// the reports of one job agree on its steps and learning rates (the two
// copies there were once disagreed on the rate).
TEST(PetraTrainReport, BothRunnersReportTheSameStepsAndRates) {
  TempDir dir;
  for (const char* runner : {"in-process", "fleet"}) {
    std::vector<std::string> args = {"train",
                                     "--runner",
                                     runner,
                                     "--quiet",
                                     "--output",
                                     dir.path() + "/" + runner + ".pt",
                                     "--report",
                                     dir.path() + "/" + runner + ".json",
                                     "--lr",
                                     "0.05",
                                     "--warmup-epochs",
                                     "1"};
    const std::vector<std::string> job = SmallJob(2);
    args.insert(args.end(), job.begin(), job.end());
    RunResult r = RunToExit(kPetra, args, std::chrono::seconds(300));
    ASSERT_EQ(r.exit_code, 0) << runner << r.err;
  }
  RunResult py = RunToExit(
      "/usr/bin/python3",
      {"-c",
       "import json, sys\n"
       "a, b = (json.load(open(p)) for p in sys.argv[1:3])\n"
       "ka = [(e['epoch'], e['step'], e['learning_rate']) for e in "
       "a['epochs']]\n"
       "kb = [(e['epoch'], e['step'], e['learning_rate']) for e in "
       "b['epochs']]\n"
       "assert ka == kb, (ka, kb)\n"
       "assert len(ka) == 2 and ka[0][2] > 0 and ka[0][2] != ka[1][2], ka\n"
       "print('ok')\n",
       dir.path() + "/in-process.json", dir.path() + "/fleet.json"});
  EXPECT_EQ(py.exit_code, 0) << py.err;
  EXPECT_THAT(py.out, HasSubstr("ok"));
}

}  // namespace
}  // namespace petra::testing

namespace petra::testing {
namespace {

// What a user with 64 devices tried: more devices than stages become
// replicas of the pipeline (said in the output), the run names what binds
// it, and the JSON carries the split.
TEST(PetraSimulate, SixtyFourDevicesRunReplicasAndNameTheirBound) {
  RunResult r =
      RunToExit(kPetra,
                {"simulate", "--arch", "revnet50", "--stages", "4",
                 "--device-flops-per-second", "1e14", "--devices", "64",
                 "--devices-per-host", "8", "--cross-host-bandwidth", "1e10",
                 "--link-bandwidth", "1e11", "--schedule", "petra"},
                std::chrono::seconds(300));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Devices: 64 (16 replicas x 4, one per stage)"));
  EXPECT_THAT(r.out, HasSubstr("64 devices for 4 stages: 16 replicas"));
  EXPECT_THAT(r.out, HasSubstr("bound by"));
  RunResult json =
      RunToExit(kPetra,
                {"simulate", "--arch", "revnet50", "--stages", "4",
                 "--device-flops-per-second", "1e14", "--devices", "32",
                 "--replicas", "8", "--schedule", "petra", "--json"},
                std::chrono::seconds(300));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  RunResult py = RunToExit(
      "/usr/bin/python3",
      {"-c",
       "import json, sys\n"
       "doc = json.loads(sys.argv[1])\n"
       "assert doc['inputs']['replicas'] == 8, doc['inputs']\n"
       "run = doc['schedules'][0]\n"
       "assert run['replicas'] == 8 and run['bound'], run['bound']\n"
       "assert all(s['allreduce_seconds'] > 0 for s in run['stages'])\n"
       "print('ok')\n",
       json.out});
  EXPECT_EQ(py.exit_code, 0) << py.err << json.out.substr(0, 2000);
  // 64 devices do not split into 3 replicas; 8 per replica exceed 4 stages.
  r = RunToExit(kPetra, {"simulate", "--uniform-stages", "4",
                         "--forward-seconds", "1", "--backward-seconds", "2",
                         "--devices", "64", "--replicas", "3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("do not split into 3 replicas"));
  r = RunToExit(kPetra, {"simulate", "--uniform-stages", "4",
                         "--forward-seconds", "1", "--backward-seconds", "2",
                         "--devices", "64", "--replicas", "8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("at most one device per stage"));
}

// `petra generate` refuses what it cannot use, saying why, before it reads
// or writes anything.
TEST(GenerateCommand, RefusesBadInputClearly) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"generate", "--prompt", "a"}, 2, "--model is required"},
      {{"generate", "--model", "x.pt"}, 2, "--prompt is required"},
      {{"generate", "--model", "x.pt", "--prompt", ""}, 2, "--prompt: empty"},
      {{"generate", "--model", "x.pt", "--prompt", "a", "--seed", "-1"},
       2,
       "--seed: must be >= 0"},
      {{"generate", "--model", "x.pt", "--prompt", "a", "--arch", "revnet18"},
       2,
       "is not a language model"},
      {{"generate", "--model", "/nonexistent/x.pt", "--prompt", "a"},
       1,
       "/nonexistent/x.pt"},
  };
  for (const Case& c : cases) {
    RunResult r = RunToExit(kPetra, c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.says << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << r.err;
  }
}

}  // namespace
}  // namespace petra::testing
