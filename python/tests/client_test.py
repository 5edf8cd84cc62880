"""petra.Client against a real coordinator and stage servers on loopback.

Starts two stage servers and a coordinator that requires a bearer token
(the binaries of PETRA_BIN_DIR, ephemeral ports, a temporary state dir),
drives them only through petra.Client, and stops them all at the end. Also
installs the package with pip into a venv, offline, as docs/USING.md
("Python: load an export, drive the fleet") says.
"""

import gzip
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
SOURCE_DIR = os.environ.get("PETRA_SOURCE_DIR",
                            os.path.dirname(PYTHON_DIR))
BIN = os.environ.get("PETRA_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
STUBS = os.environ.get("PETRA_PYTHON_STUBS",
                       os.path.join(SOURCE_DIR, "build", "python"))
sys.path[:0] = [PYTHON_DIR, STUBS]

import torch  # noqa: E402

import petra  # noqa: E402
from petra.v1 import coordinator_pb2 as pb  # noqa: E402
from petra.v1 import membership_pb2  # noqa: E402

import grpc  # noqa: E402

TOKEN = "s3cret-token"
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
# Quotes, a backslash and non-ASCII text must survive the round trip.
AWKWARD_NAME = 'run "A" \\ caf\u00e9 \u2603 \U0001d11e'


def read_idx_split(folder, split, limit):
    """The first `limit` images of an IDX split, pixel values in [0, 1], and
    their labels."""
    def read(name):
        with gzip.open(os.path.join(folder, name + ".gz")) as f:
            return f.read()
    raw = read("%s-images-idx3-ubyte" % split)
    n, rows, cols = struct.unpack(">III", raw[4:16])
    images = torch.frombuffer(bytearray(raw[16:16 + limit * rows * cols]),
                              dtype=torch.uint8)
    labels = torch.frombuffer(bytearray(
        read("%s-labels-idx1-ubyte" % split)[8:8 + limit]), dtype=torch.uint8)
    return (images.view(limit, 1, rows, cols).float() / 255,
            labels.long())


def small_job(epochs, name=None):
    spec = {
        "model": {"architecture": "ARCHITECTURE_REVNET18", "width": 0.125},
        "dataset": {"kind": "DATASET_KIND_SYNTHETIC"},
        "partition": {"stageCount": 2},
        "training": {"epochs": epochs},
        "seed": "3",
    }
    if name is not None:
        spec["name"] = name
    return spec


class Fleet:
    """Two stage servers and a coordinator, each a child process."""

    def __init__(self, root, data_root="/usr/share/datasets"):
        self.root = root
        self.processes = []
        self.logs = []
        self.token_file = os.path.join(root, "token")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        stages = []
        for j in range(2):
            port = self._start("petra-stage-server", [
                "--listen", "127.0.0.1:0", "--metrics-listen", "",
                "--threads", "1", "--insecure",
                "--state-dir", os.path.join(root, "stage-%d" % j)])
            stages.append("127.0.0.1:%d" % port)
        port = self._start("petra-coordinator", [
            "--listen", "127.0.0.1:0", "--metrics-listen", "",
            "--stages", ",".join(stages),
            "--data-root", data_root,
            "--state-dir", os.path.join(root, "coordinator"),
            "--auth-token-file", self.token_file])
        self.address = "127.0.0.1:%d" % port

    def _start(self, program, args):
        log = open(os.path.join(self.root, "%s-%d.log"
                                % (program, len(self.processes))), "w+")
        self.logs.append(log)
        p = subprocess.Popen([os.path.join(BIN, program)] + args,
                             stdout=subprocess.PIPE, stderr=log, text=True)
        self.processes.append(p)
        deadline = time.time() + 60
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            m = re.search(r"listening on port (\d+)", line)
            if m:
                return int(m.group(1))
        log.seek(0)
        raise RuntimeError("%s did not start: %s" % (program, log.read()))

    def stop(self):
        for p in self.processes:
            p.terminate()
        for p in self.processes:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
        for log in self.logs:
            log.close()


class ClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="petra-client-test-")
        # A data root of the test's own, whose Fashion-MNIST can be moved
        # away once a job has trained on it.
        cls.data_root = os.path.join(cls.root, "datasets")
        os.makedirs(cls.data_root)
        # A copy: a link out of the data root would be refused by it.
        shutil.copytree(FASHION_MNIST,
                        os.path.join(cls.data_root, "fashion-mnist"))
        cls.fleet = Fleet(cls.root, cls.data_root)
        cls.client = petra.Client(cls.fleet.address,
                                  token_file=cls.fleet.token_file)
        # Exports without a path land in the working directory; ctest runs
        # these tests side by side, each with its own fleet and so its own
        # job-1, so each works in its own folder.
        cls.cwd = os.getcwd()
        os.chdir(cls.root)

    @classmethod
    def tearDownClass(cls):
        os.chdir(cls.cwd)
        cls.client.close()
        cls.fleet.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def run_without_petra(self, script, inputs):
        """The TorchScript file's output on `inputs`, computed by a Python
        with no petra code (python -I: no user site, no PYTHONPATH)."""
        batch = os.path.join(self.root, "script-input.pt")
        out = os.path.join(self.root, "script-output.pt")
        torch.save(inputs, batch)
        run = subprocess.run(
            ["/usr/bin/python3", "-I", "-c",
             "import sys, torch\n"
             "assert 'petra' not in sys.modules\n"
             "m = torch.jit.load(sys.argv[1])\n"
             "with torch.no_grad():\n"
             "    torch.save(m(torch.load(sys.argv[2])), sys.argv[3])\n",
             os.path.abspath(script), batch, out],
            capture_output=True, text=True, cwd=self.root)
        self.assertEqual(run.returncode, 0, run.stderr)
        return torch.load(out)

    def test_submit_watch_export_and_load_into_petra_models(self):
        job = self.client.submit(small_job(1, AWKWARD_NAME))
        self.assertTrue(job.id.startswith("job-"), job)
        self.assertEqual(job.spec.name, AWKWARD_NAME)
        kinds = []
        final = None
        for event in self.client.watch(job.id):
            kinds.append(event.kind)
            final = event.job
        self.assertIn(pb.JobEvent.KIND_EPOCH_END, kinds)
        self.assertEqual(final.state, pb.JOB_STATE_SUCCEEDED, final)
        self.assertEqual(petra.Client.to_dict(final)["spec"]["name"],
                         AWKWARD_NAME)
        self.assertTrue(final.progress.HasField("test_accuracy"))

        path = os.path.join(self.root, AWKWARD_NAME + ".pt")
        self.assertEqual(self.client.export(job.id, path), path)
        self.assertFalse(os.path.exists(path + ".partial"))
        state = torch.load(path)
        model = petra.models.from_spec(petra.Client.to_dict(final))
        model.load_state_dict(state, strict=True)
        model.eval()

        # The TorchScript export runs with no petra code (python -I: no
        # user site, no PYTHONPATH) and computes what petra.models does,
        # both normalising the [0, 1] images with the export's input.*.
        script = self.client.export(job.id, format="torchscript")
        self.addCleanup(os.remove, script)
        self.assertEqual(script, job.id + ".torchscript.pt")
        images = torch.rand(3, 3, 32, 32)
        scripted = self.run_without_petra(script, images)
        buffers = dict(torch.jit.load(script).named_buffers())
        torch.testing.assert_close(buffers["input.mean"], state["input.mean"])
        torch.testing.assert_close(buffers["input.std"], state["input.std"])
        with torch.no_grad():
            want = model(images)
        torch.testing.assert_close(scripted, want, atol=1e-5, rtol=1e-5)
        with self.assertRaisesRegex(ValueError, "not state_dict or"):
            self.client.export(job.id, format="onnx")

    def test_an_export_carries_its_preprocessing(self):
        # A real test split: petra.models on pixel values in [0, 1] scores
        # what the fleet scored, and the TorchScript export is made from the
        # export alone after the data has moved away.
        test_limit = 1000
        job = self.client.submit({
            "model": {"architecture": "revnet18", "width": 0.125},
            "dataset": {"kind": "fashion_mnist", "train_limit": "2048",
                        "test_limit": str(test_limit)},
            "partition": {"stage_count": 2},
            "training": {"epochs": 1},
            "seed": "3"})
        final = self.client.wait(job.id)
        self.assertEqual(final.state, pb.JOB_STATE_SUCCEEDED, final)
        names = list(final.preprocessing.class_names)
        self.assertEqual(names[9], "Ankle boot")
        self.assertEqual(list(final.preprocessing.input_shape), [1, 28, 28])
        self.assertEqual(len(final.preprocessing.mean), 1)

        here = os.path.join(self.data_root, "fashion-mnist")
        away = os.path.join(self.root, "moved-away")
        os.rename(here, away)  # the data root no longer has it
        self.addCleanup(os.rename, away, here)
        path = os.path.join(self.root, "carried.pt")
        self.client.export(job.id, path)
        script = self.client.export(job.id, format="torchscript")
        self.addCleanup(os.remove, script)

        model = petra.models.from_spec(petra.Client.to_dict(final))
        model.load_state_dict(torch.load(path), strict=True)
        model.eval()
        self.assertEqual(model.class_names, names)
        images, labels = read_idx_split(FASHION_MNIST, "t10k", test_limit)
        with torch.no_grad():
            logits = model(images)
            scripted = torch.jit.load(script)(images)
        accuracy = (logits.argmax(1) == labels).double().mean().item()
        self.assertAlmostEqual(accuracy, final.progress.test_accuracy,
                               delta=0.005)
        torch.testing.assert_close(scripted, logits, atol=1e-4, rtol=1e-4)
        self.assertEqual(list(torch.jit.load(script).class_names), names)
        # Before: the same model on [0, 1] without the normalisation is far
        # off, which is what users met.
        model.input.mean.zero_()
        model.input.std.fill_(1)
        with torch.no_grad():
            plain = (model(images).argmax(1) == labels).double().mean().item()
        self.assertLess(plain, accuracy)

    def test_a_language_model_trains_exports_and_writes(self):
        # revlm on a text folder of the data root: the export loads into
        # petra.models (from the job's spec), writes, and its TorchScript
        # export gives the same logits with no petra code.
        folder = os.path.join(self.data_root, "fox")
        line = "the quick brown fox jumps over the lazy dog. "
        for split, times in (("train", 2000), ("valid", 40)):
            os.makedirs(os.path.join(folder, split), exist_ok=True)
            with open(os.path.join(folder, split, "a.txt"), "w") as f:
                f.write(line * times)
        job = self.client.submit({
            "model": {"architecture": "revlm",
                      "transformer": {"embed_dim": 32, "depth": 2,
                                      "heads": 2, "seq_len": 32}},
            "dataset": {"kind": "text", "path": "fox"},
            "partition": {"stage_count": 2},
            "training": {"epochs": 2},
            # Above the recipe's 1e-3: 88 steps an epoch learn the line.
            "optimizer": {"learning_rate": 0.005},
            "seed": "4"})
        final = self.client.wait(job.id)
        self.assertEqual(final.state, pb.JOB_STATE_SUCCEEDED, final)
        self.assertEqual(list(final.preprocessing.input_shape), [32])
        path = os.path.join(self.root, "lm.pt")
        self.client.export(job.id, path)
        model = petra.models.from_spec(petra.Client.to_dict(final))
        self.assertIsInstance(model, petra.models.LanguageModel)
        model.load_state_dict(torch.load(path), strict=True)
        model.eval()
        # Two epochs of one repeated line: the model has learnt it. Scored
        # as a likelihood (nats a byte of the line's next 16 bytes after
        # 16 of it), not by matching a string: chance is ln(1/256) = -5.5.
        ids = model.encode(line * 2)
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids[:32]])), -1)
        score = sum(logp[0, i - 1, ids[i]].item()
                    for i in range(16, 32)) / 16
        self.assertGreater(score, -1.0)
        out = petra.models.generate(model, model.encode(line[:20]),
                                    max_new_tokens=8, seed=2)
        self.assertEqual(len(out), 8)

        script = self.client.export(job.id, format="torchscript")
        self.addCleanup(os.remove, script)
        tokens = torch.tensor([model.encode(line * 2)[:32]] * 2)
        scripted = self.run_without_petra(script, tokens)
        with torch.no_grad():
            want = model(tokens)
        torch.testing.assert_close(scripted, want, atol=1e-5, rtol=1e-5)

    def test_list_get_and_cancel(self):
        running = self.client.submit(small_job(200))

        def stop_if_running():  # the test may fail before it cancels
            if self.client.get(running.id).state in (
                    pb.JOB_STATE_QUEUED, pb.JOB_STATE_STARTING,
                    pb.JOB_STATE_RUNNING, pb.JOB_STATE_RECOVERING):
                self.client.cancel(running.id)
        self.addCleanup(stop_if_running)
        queued = self.client.submit(small_job(1))
        self.assertEqual(self.client.get(queued.id).state,
                         pb.JOB_STATE_QUEUED)
        ids = [j.id for j in self.client.list()]
        self.assertLess(ids.index(queued.id), ids.index(running.id))
        # The fleet: the two --stages servers, each as it answered.
        servers = self.client.servers()
        self.assertEqual(len(servers), 2)
        for server in servers:
            self.assertEqual(server.origin,
                             membership_pb2.FleetServer.ORIGIN_STATIC)
            self.assertEqual(server.error, "")
            self.assertEqual(server.status.device, "cpu")
            self.assertFalse(server.HasField("lease_expire_time"))
        # States in the command line's words, not protobuf's numbers (what
        # a new user printed from list()).
        states = {j.id: petra.state_name(j) for j in self.client.list()}
        self.assertEqual(states[queued.id], "queued")
        self.assertIn(states[running.id], ("starting", "running"))
        self.assertIn(queued.id, [j.id for j in self.client.list("queued")])
        cancelled = self.client.cancel(queued.id)
        self.assertEqual(cancelled.state, pb.JOB_STATE_CANCELLED)
        self.assertEqual(petra.state_name(cancelled), "cancelled")
        self.assertEqual(petra.state_name(pb.JOB_STATE_RECOVERING),
                         "recovering")
        self.client.cancel(running.id)
        end = self.client.wait(running.id)
        self.assertEqual(end.state, pb.JOB_STATE_CANCELLED, end)
        # An ended job is not cancelled again, and the error says why.
        with self.assertRaises(petra.ClientError) as e:
            self.client.cancel(running.id)
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("has already ended (cancelled): nothing to cancel",
                      e.exception.message)
        with self.assertRaisesRegex(ValueError, "unknown state 'sleeping'"):
            self.client.list("sleeping")

    def test_specs_take_short_enum_names_as_the_flags_do(self):
        from petra import client
        from petra.v1 import job_pb2 as job
        from petra.v1 import training_pb2 as training
        spec = client._spec({
            "model": {"architecture": "revvit", "variant": "MNIST"},
            "dataset": {"kind": "image-folder", "path": "revvit",
                        "imageFolder": {"corrupt_images": "skip"}},
            "training": {"mode": "TRAINING_MODE_BACKPROP"}})
        self.assertEqual(spec.model.architecture, job.ARCHITECTURE_REVVIT)
        self.assertEqual(spec.model.variant, job.VARIANT_MNIST)
        self.assertEqual(spec.dataset.kind, job.DATASET_KIND_IMAGE_FOLDER)
        self.assertEqual(spec.dataset.path, "revvit")
        self.assertEqual(spec.dataset.image_folder.corrupt_images,
                         job.ImageFolderSpec.CORRUPT_IMAGE_POLICY_SKIP)
        self.assertEqual(spec.training.mode, training.TRAINING_MODE_BACKPROP)
        with self.assertRaisesRegex(ValueError, "spec: .*imagefolder"):
            client._spec({"dataset": {"kind": "imagefolder"}})

    def test_refusals_are_clear(self):
        with self.assertRaises(petra.ClientError) as e:
            self.client.get("job-404")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn('no job with id "job-404"', e.exception.message)
        with self.assertRaises(petra.ClientError) as e:
            self.client.submit({"training": {"epochs": 0}})
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("training.epochs = 0", e.exception.message)
        with self.assertRaisesRegex(ValueError, "spec: .*noSuchField"):
            self.client.submit({"noSuchField": 1})
        with self.assertRaisesRegex(ValueError, "spec: not JSON"):
            self.client.submit("{not json")
        wrong = petra.Client(self.fleet.address, token="wrong-token")
        with self.assertRaises(petra.ClientError) as e:
            wrong.list()
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        with self.assertRaisesRegex(ValueError, "printable ASCII"):
            petra.Client(self.fleet.address, token="two words")
        with self.assertRaisesRegex(ValueError, "tls_cert and tls_key"):
            petra.Client(self.fleet.address, tls_cert="/no/cert.pem")
        nowhere = petra.Client("127.0.0.1:1", token=TOKEN, timeout=5)
        with self.assertRaises(petra.ClientError) as e:
            nowhere.list()
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("cannot reach the coordinator at 127.0.0.1:1",
                      e.exception.message)

    def test_environment_defaults(self):
        saved = dict(os.environ)
        try:
            os.environ["PETRA_COORDINATOR"] = self.fleet.address
            os.environ["PETRA_AUTH_TOKEN_FILE"] = self.fleet.token_file
            with petra.Client() as c:
                self.assertEqual(c.address, self.fleet.address)
                self.assertIsInstance(c.list(), list)
            # An argument wins over the environment.
            os.environ["PETRA_COORDINATOR"] = "127.0.0.1:1"
            with petra.Client(self.fleet.address) as c:
                c.list()
        finally:
            os.environ.clear()
            os.environ.update(saved)


class _Unavailable(grpc.RpcError):
    """What a stream raises when its coordinator goes away."""

    def __init__(self, details="Socket closed"):
        super().__init__(details)
        self._details = details

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return self._details


class WatchReconnectTest(unittest.TestCase):
    """Client.watch through a coordinator that goes away mid-job: a stub
    whose WatchJob streams are scripted (no processes)."""

    def client_with(self, streams):
        """A client whose WatchJob answers each call with the next of
        `streams`: a list of JobStates to stream, then an exception or None
        (the stream ends well)."""
        client = petra.Client("127.0.0.1:1")
        calls = []

        def watch_job(request, metadata=None):
            calls.append(request.job_id)
            states, end = streams.pop(0)

            def events():
                for state in states:
                    yield pb.JobEvent(job=pb.Job(id=request.job_id,
                                                 state=state))
                if end is not None:
                    raise end
            return events()

        client._stub = type("Stub", (), {"WatchJob": staticmethod(watch_job)})
        return client, calls

    def test_a_restart_mid_job_is_ridden_through(self):
        running, done = pb.JOB_STATE_RUNNING, pb.JOB_STATE_SUCCEEDED
        client, calls = self.client_with([
            ([running], _Unavailable()),             # the coordinator dies
            ([], _Unavailable("connection refused")),  # still away
            ([pb.JOB_STATE_RECOVERING, running, done], None)])
        said = []
        states = [e.job.state for e in client.watch(
            "job-1", reconnect_timeout=30, on_reconnect=said.append)]
        self.assertEqual(states, [running, pb.JOB_STATE_RECOVERING, running,
                                  done])
        self.assertEqual(calls, ["job-1"] * 3)
        self.assertIn("coordinator unreachable (Socket closed)", said[0])
        self.assertIn("coordinator reachable again after", said[1])
        client.close()

    def test_a_coordinator_that_stays_away_is_unavailable(self):
        client, _ = self.client_with(
            [([pb.JOB_STATE_RUNNING], _Unavailable())] +
            [([], _Unavailable("connection refused"))] * 10)
        with self.assertRaises(petra.ClientError) as e:
            for _ in client.watch("job-1", reconnect_timeout=1):
                pass
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("stayed unreachable for 1 s", str(e.exception))
        client.close()

    def test_a_coordinator_never_reached_fails_at_once(self):
        client, calls = self.client_with([([], _Unavailable("refused"))])
        with self.assertRaises(petra.ClientError):
            list(client.watch("job-1", reconnect_timeout=30))
        self.assertEqual(len(calls), 1)
        client.close()


class InstallTest(unittest.TestCase):

    def test_pip_installs_offline_into_a_venv(self):
        # A copy of python/ and proto/, so that the build writes nothing
        # into the source tree.
        root = tempfile.mkdtemp(prefix="petra-pip-test-")
        try:
            src = os.path.join(root, "src")
            shutil.copytree(PYTHON_DIR, os.path.join(src, "python"),
                            ignore=shutil.ignore_patterns(
                                "__pycache__", "build", "*.egg-info"))
            shutil.copytree(os.path.join(SOURCE_DIR, "proto"),
                            os.path.join(src, "proto"))
            before = set(os.listdir(os.path.join(src, "python")))
            venv = os.path.join(root, "venv")
            subprocess.run(["/usr/bin/python3", "-m", "venv",
                            "--system-site-packages", venv], check=True)
            pip = subprocess.run(
                [os.path.join(venv, "bin", "pip"), "install", "--no-index",
                 "--no-build-isolation", os.path.join(src, "python")],
                capture_output=True, text=True)
            self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
            # The build left the source folder as it was.
            left = sorted(set(os.listdir(os.path.join(src, "python"))) -
                          before)
            self.assertEqual(left, [], "pip left these in python/")
            check = subprocess.run(
                [os.path.join(venv, "bin", "python"), "-c",
                 "import petra, petra.v1.coordinator_pb2_grpc as g\n"
                 "assert hasattr(g, 'CoordinatorServiceStub')\n"
                 "assert petra.Client and petra.ClientError\n"
                 "m = petra.models.build('revnet18', variant='mnist', "
                 "width=0.25)\n"
                 "print(petra.__file__)\n"],
                capture_output=True, text=True, cwd=root)
            self.assertEqual(check.returncode, 0, check.stderr)
            self.assertIn(os.path.join(venv, "lib"), check.stdout)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
