"""Offline proof of the deployment files (deploy/).

No Docker engine or cluster runs here, so the tests render what the tools
would render (Debian's docker-compose and kubectl kustomize), validate every
Kubernetes object against the API schema of its kind (npm's
kubernetes-models, tests/deploy/validate_k8s.js), and start the exact
commands and flags the manifests give the coordinator and the stage servers
as local processes on loopback (addresses, ports and state directories
rewritten), then run a short job through them with the petra client.

The Kubernetes manifests and the compose TLS override run with mutual TLS
and a bearer token: the launch tests make the certificates and the token
with scripts/make-certs.sh, put them where the manifests mount the Secrets,
and drive the fleet with client certificates.

Run by CTest (tests/deploy/CMakeLists.txt), one test per method:
  python3 deploy_test.py ComposeTest.test_renders
The environment names the programs: PETRA_SOURCE_DIR, PETRA_BIN_DIR,
PETRA_KUBECTL (Debian's kubectl), PETRA_NODE, PETRA_DOCKER_COMPOSE,
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

import yaml

SOURCE = os.environ.get("PETRA_SOURCE_DIR", "")
BIN = os.environ.get("PETRA_BIN_DIR", "")
KUBECTL = os.environ.get("PETRA_KUBECTL", "")
NODE = os.environ.get("PETRA_NODE", "node")
COMPOSE = os.environ.get("PETRA_DOCKER_COMPOSE", "docker-compose")
PROMTOOL = os.environ.get("PETRA_PROMTOOL", "promtool")

DEPLOY = os.path.join(SOURCE, "deploy")
COMPOSE_DIR = os.path.join(DEPLOY, "compose")
DASHBOARD = os.path.join(DEPLOY, "grafana", "dashboards", "petra-fleet.json")
PETRA_PROGRAMS = ("petra", "petra-coordinator", "petra-stage-server")
# What the image's user is (deploy/docker/Dockerfile) and Kubernetes checks.
IMAGE_UID = 10001
# The short job run through the launched fleet: real Fashion-MNIST from the
# data root the manifests pass, a few hundred examples, seconds to run.
SHORT_JOB = ["--arch", "revnet18", "--width", "0.125", "--dataset",
             "fashion_mnist", "--train-limit", "512", "--test-limit", "256",
             "--stages", "2", "--epochs", "1", "--seed", "5"]


def run(args, timeout=120, env=None, check=True):
    """Runs a command to its end; returns (exit code, stdout, stderr)."""
    result = subprocess.run(args, capture_output=True, text=True,
                            timeout=timeout, env=env)
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


def expand_stage_pattern(value):
    """The coordinator's --stages syntax: a,b or host-{A..B}.rest:port."""
    out = []
    for entry in value.split(","):
        m = re.search(r"\{(\d+)\.\.(\d+)\}", entry)
        if not m:
            out.append(entry)
            continue
        for i in range(int(m.group(1)), int(m.group(2)) + 1):
            out.append(entry[:m.start()] + str(i) + entry[m.end():])
    return out


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
    """Shared by the compose and Kubernetes launch tests: starts the stage
    servers, then the coordinator with --stages rewritten to where they
    listen, checks health and metrics, and runs the short job."""

    def launch_and_train(self, stages, coordinator, health_checks,
                         client=()):
        """stages: [(name, command)] in stage order; coordinator: command;
        health_checks: {name: (port in the manifest, check command or None)};
        client: the TLS and token flags `petra` needs (none: plaintext).
        """
        workdir = tempfile.mkdtemp(prefix="petra-deploy-")
        fleet = Fleet(self, workdir)
        try:
            ports = {}
            for name, command in stages:
                ports[name] = fleet.start(name, command)
            addresses = expand_stage_pattern(
                flag_value(coordinator[1:], "stages"))
            self.assertEqual(
                len(addresses), len(stages),
                "the coordinator's --stages names %d servers, the manifests "
                "run %d" % (len(addresses), len(stages)))
            local = []
            for address, (name, command) in zip(addresses, stages):
                host, port = address.rsplit(":", 1)
                # A stage's address names its service or pod, and its port
                # is the one the stage listens on.
                self.assertEqual(host.split(".")[0], name)
                self.assertEqual(port,
                                 flag_value(command[1:], "listen").split(":")[-1])
                local.append("127.0.0.1:%d" % ports[name][0])
            coordinator = with_flag(coordinator, "stages", ",".join(local))
            ports["coordinator"] = fleet.start("coordinator", coordinator)

            for name, (manifest_port, check) in health_checks.items():
                grpc_port = ports[name][0]
                if check is None:  # Kubernetes' own gRPC probe
                    check = ["petra", "health", "--address",
                             "127.0.0.1:%d" % manifest_port]
                self.assertEqual(check[:2], ["petra", "health"])
                address = flag_value(check, "address")
                self.assertEqual(int(address.rsplit(":", 1)[1]), manifest_port,
                                 "%s's health check asks another port" % name)
                check = with_flag(check, "address", "127.0.0.1:%d" % grpc_port)
                run([os.path.join(BIN, "petra")] + check[1:], timeout=30)

            for name, (_, metrics_port) in ports.items():
                self.assertIsNotNone(metrics_port, "%s exports no metrics" % name)
                body = self.http_get(metrics_port)
                self.assertIn("petra_build_info", body)

            coordinator_address = "127.0.0.1:%d" % ports["coordinator"][0]
            client = list(client)
            if client:
                # Without the client's credentials the coordinator refuses.
                code, _, err = run([os.path.join(BIN, "petra"), "list",
                                    "--coordinator", coordinator_address],
                                   check=False)
                self.assertEqual(code, 1, err)
                self.assertIn("cannot reach the coordinator", err)
            _, out, _ = run([os.path.join(BIN, "petra"), "submit",
                             "--coordinator", coordinator_address] +
                            client + SHORT_JOB)
            job_id = re.search(r"(job-[0-9a-zA-Z-]+)", out)
            self.assertIsNotNone(job_id, "no job id in: " + out)
            _, out, _ = run([os.path.join(BIN, "petra"), "watch",
                             "--coordinator", coordinator_address] + client +
                            [job_id.group(1)], timeout=600)
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

    @staticmethod
    def http_get(port):
        import urllib.request
        with urllib.request.urlopen(
                "http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            return r.read().decode()


def compose_config(*files, env=None):
    args = [COMPOSE]
    for f in files:
        args += ["-f", os.path.join(COMPOSE_DIR, f)]
    full_env = dict(os.environ)
    full_env.update(env or {})
    return yaml.safe_load(run(args + ["config"], env=full_env)[1])


def is_petra(service):
    command = service.get("command") or []
    return bool(command) and command[0] in PETRA_PROGRAMS


class ComposeTest(unittest.TestCase, FleetLaunch):
    def test_renders(self):
        config = compose_config("docker-compose.yml")
        services = config["services"]
        self.assertEqual(
            sorted(services),
            ["coordinator", "grafana", "prometheus", "stage-0", "stage-1"])
        for name, service in services.items():
            if not is_petra(service):
                continue
            # Built from this repository's Dockerfile.
            build = service["build"]
            self.assertEqual(
                os.path.realpath(os.path.join(build["context"],
                                              build["dockerfile"])),
                os.path.realpath(os.path.join(DEPLOY, "docker", "Dockerfile")))
            # State on a named volume at the program's --state-dir.
            state_dir = flag_value(service["command"][1:], "state-dir")
            mounts = {v.split(":")[1]: v.split(":")[0]
                      for v in service["volumes"]}
            self.assertIn(state_dir, mounts, name)
            self.assertIn(mounts[state_dir], config["volumes"], name)
            self.assertEqual(service["healthcheck"]["test"][0], "CMD")
        # Data: the coordinator's --data-root holds the user's dataset mount.
        coordinator = services["coordinator"]
        data_root = flag_value(coordinator["command"][1:], "data-root")
        self.assertTrue(any(v.split(":")[1].startswith(data_root + "/")
                            and v.endswith(":ro")
                            for v in coordinator["volumes"]))
        # Every bind-mounted file or folder exists in the repository.
        for name, service in services.items():
            for volume in service.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("/"):
                    self.assertTrue(os.path.exists(source),
                                    "%s mounts missing %s" % (name, source))
        # Grafana: the datasource file's ${PROMETHEUS_URL} is set, and the
        # dashboard provider's path is where the dashboards are mounted.
        grafana = services["grafana"]
        self.assertTrue(grafana["environment"]["PROMETHEUS_URL"].startswith(
            "http://prometheus:"))
        with open(os.path.join(DEPLOY, "grafana", "provisioning",
                               "dashboards", "petra.yaml")) as f:
            provider_path = yaml.safe_load(f)["providers"][0]["options"]["path"]
        mounted = {v.split(":")[1]: v.split(":")[0]
                   for v in grafana["volumes"]}
        self.assertEqual(os.path.realpath(mounted[provider_path]),
                         os.path.dirname(os.path.realpath(DASHBOARD)))

    def test_gpu_override_renders(self):
        config = compose_config("docker-compose.yml", "docker-compose.gpu.yml",
                                env={"PETRA_DEVICE": "cuda",
                                     "PETRA_IMAGE": "petra-fleet:cuda"})
        stages = [s for n, s in config["services"].items()
                  if n.startswith("stage-")]
        self.assertEqual(len(stages), 2)
        gpus = set()
        for service in stages:
            self.assertEqual(flag_value(service["command"][1:], "device"),
                             "cuda")
            self.assertEqual(service["image"], "petra-fleet:cuda")
            (device,) = service["deploy"]["resources"]["reservations"][
                "devices"]
            self.assertIn("gpu", device["capabilities"])
            gpus.update(device["device_ids"])
        self.assertEqual(len(gpus), 2, "stages share a GPU")

    def test_prometheus_scrapes_every_process(self):
        path = os.path.join(COMPOSE_DIR, "prometheus.yml")
        run([PROMTOOL, "check", "config", path])
        with open(path) as f:
            prometheus = yaml.safe_load(f)
        targets = {t for job in prometheus["scrape_configs"]
                   for sc in job["static_configs"] for t in sc["targets"]}
        services = compose_config("docker-compose.yml")["services"]
        expected = set()
        for name, service in services.items():
            if is_petra(service):
                port = flag_value(service["command"][1:],
                                  "metrics-listen").rsplit(":", 1)[1]
                expected.add("%s:%s" % (name, port))
        self.assertEqual(targets, expected)

    def tls_config(self, certs):
        return compose_config("docker-compose.yml", "docker-compose.tls.yml",
                              env={"PETRA_TLS_DIR": certs})

    def test_tls_override_renders(self):
        with tempfile.TemporaryDirectory() as certs:
            base = compose_config("docker-compose.yml")["services"]
            services = self.tls_config(certs)["services"]
        self.assertEqual(sorted(services), sorted(base))
        for name, service in services.items():
            if not is_petra(service):
                continue
            command = service["command"]
            # The base command, unchanged, then the TLS flags.
            self.assertEqual(command[:len(base[name]["command"])],
                             base[name]["command"], name)
            for flag in ("tls-cert", "tls-key", "tls-ca"):
                self.assertIsNotNone(flag_value(command[1:], flag), name)
            test = service["healthcheck"]["test"]
            self.assertEqual(test[:len(base[name]["healthcheck"]["test"])],
                             base[name]["healthcheck"]["test"], name)
            # Only its own certificate folder (never the CA key) is mounted.
            sources = [v.split(":")[0] for v in service["volumes"]]
            self.assertNotIn(certs, sources, name)
            self.assertTrue(any(s.startswith(certs + "/") for s in sources),
                            name)
        self.assertIsNotNone(flag_value(services["coordinator"]["command"][1:],
                                        "auth-token-file"))
        self.assertEqual(flag_value(services["stage-0"]["command"][1:],
                                    "coordinator-identity"),
                         "petra-coordinator")

    def test_launch_tls_override(self):
        certs = os.path.join(tempfile.mkdtemp(prefix="petra-certs-"), "out")
        make_certs(certs)
        services = self.tls_config(certs)["services"]

        def local(service, args):
            # Only the certificate mounts: state volumes are rewritten by
            # Fleet.start.
            mounts = {v.split(":")[1]: v.split(":")[0]
                      for v in service["volumes"]
                      if v.split(":")[0].startswith(certs)}
            return localize(args, mounts)
        stages = sorted((n, local(s, s["command"]))
                        for n, s in services.items()
                        if is_petra(s) and s["command"][0] ==
                        "petra-stage-server")
        checks = {}
        for name, service in services.items():
            if is_petra(service):
                port = int(flag_value(service["command"][1:],
                                      "listen").rsplit(":", 1)[1])
                checks[name] = (port,
                                local(service, service["healthcheck"]["test"][1:]))
        coordinator = services["coordinator"]
        self.launch_and_train(stages,
                              local(coordinator, coordinator["command"]),
                              checks, client=client_flags(certs))

    def test_launch_rendered_commands(self):
        services = compose_config("docker-compose.yml")["services"]
        stages = sorted((n, s["command"]) for n, s in services.items()
                        if is_petra(s) and s["command"][0] ==
                        "petra-stage-server")
        checks = {}
        for name, service in services.items():
            if is_petra(service):
                port = int(flag_value(service["command"][1:],
                                      "listen").rsplit(":", 1)[1])
                checks[name] = (port, service["healthcheck"]["test"][1:])
        self.launch_and_train(stages, services["coordinator"]["command"],
                              checks)


def kustomize(overlay):
    """The overlay's objects, as Debian's kubectl renders them."""
    if not os.access(KUBECTL, os.X_OK):
        raise AssertionError(
            "Debian's kubectl not found at %r: run scripts/install-test-tools.sh"
            % KUBECTL)
    out = run([KUBECTL, "kustomize",
               os.path.join(DEPLOY, "k8s", "overlays", overlay)])[1]
    return [d for d in yaml.safe_load_all(out) if d]


def find(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    if not found:
        raise AssertionError("no %s %s in the rendered manifests" %
                             (kind, name or ""))
    return found


def container_command(objects, workload, container):
    """[program, args...] with $(VAR) references resolved from the
    container's env (values and ConfigMap keys), as the kubelet does."""
    pod = workload["spec"]["template"]["spec"]
    c = [c for c in pod["containers"] if c["name"] == container][0]
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["configMapKeyRef"]
            (config_map,) = find(objects, "ConfigMap", ref["name"])
            env[e["name"]] = config_map["data"][ref["key"]]

    def resolve(arg):
        def sub(m):
            if m.group(1) not in env:
                raise AssertionError("%s refers to unset $(%s)" %
                                     (container, m.group(1)))
            return env[m.group(1)]
        return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, arg)
    return [resolve(a) for a in c["command"] + c.get("args", [])]


class KubernetesTest(unittest.TestCase, FleetLaunch):
    def check_overlay(self, overlay):
        objects = kustomize(overlay)
        # Every object passes the API schema of its kind.
        if not os.path.isdir(os.path.join(SOURCE, "tests", "deploy",
                                          "node_modules", "kubernetes-models")):
            self.fail("npm's kubernetes-models is not installed: run "
                      "scripts/install-test-tools.sh")
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(objects, f)
            f.flush()
            code, out, err = run([NODE, os.path.join(SOURCE, "tests", "deploy",
                                                     "validate_k8s.js"),
                                  f.name], check=False)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(out.count("\nvalid ") + out.startswith("valid "),
                         len(objects), out)

        kinds = sorted({o["kind"] for o in objects})
        self.assertEqual(kinds, [
            "ConfigMap", "Deployment", "Namespace", "NetworkPolicy",
            "PersistentVolumeClaim", "Service", "ServiceMonitor",
            "StatefulSet"])
        for o in objects:
            if o["kind"] != "Namespace":
                self.assertEqual(o["metadata"].get("namespace"), "petra",
                                 "%s %s" % (o["kind"], o["metadata"]["name"]))

        (stage_set,) = find(objects, "StatefulSet", "petra-stage")
        (headless,) = find(objects, "Service", stage_set["spec"]["serviceName"])
        self.assertEqual(headless["spec"]["clusterIP"], "None")
        (coordinator,) = find(objects, "Deployment", "petra-coordinator")
        (coordinator_service,) = find(objects, "Service", "petra-coordinator")
        claims = {o["metadata"]["name"]
                  for o in find(objects, "PersistentVolumeClaim")}

        for workload in (stage_set, coordinator):
            pod = workload["spec"]["template"]["spec"]
            labels = workload["spec"]["template"]["metadata"]["labels"]
            self.assertTrue(pod["securityContext"]["runAsNonRoot"])
            self.assertEqual(pod["securityContext"]["runAsUser"], IMAGE_UID)
            (container,) = pod["containers"]
            ports = {p["name"]: p["containerPort"]
                     for p in container["ports"]}
            self.assertEqual(sorted(ports), ["grpc", "metrics"])
            command = container_command(objects, workload, container["name"])
            self.assertEqual(
                int(flag_value(command[1:], "listen").rsplit(":", 1)[1]),
                ports["grpc"])
            self.assertEqual(
                int(flag_value(command[1:], "metrics-listen").rsplit(":", 1)[1]),
                ports["metrics"])
            # Probes: `petra health` on the gRPC port with the container's
            # own TLS files (the kubelet's gRPC probe speaks no TLS).
            for probe in ("livenessProbe", "readinessProbe"):
                check = container[probe]["exec"]["command"]
                self.assertEqual(check[:2], ["petra", "health"], probe)
                self.assertEqual(
                    int(flag_value(check, "address").rsplit(":", 1)[1]),
                    ports["grpc"], probe)
                for flag in ("tls-ca", "tls-cert", "tls-key"):
                    self.assertIsNotNone(flag_value(check, flag), probe)
                    self.assertEqual(flag_value(check, flag),
                                     flag_value(command[1:], flag), probe)
            for bound in ("requests", "limits"):
                self.assertIn("cpu", container["resources"][bound])
                self.assertIn("memory", container["resources"][bound])
            security = container["securityContext"]
            self.assertTrue(security["readOnlyRootFilesystem"])
            self.assertFalse(security["allowPrivilegeEscalation"])
            # Writable places are volumes: the state dir and /tmp.
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            self.assertIn(flag_value(command[1:], "state-dir"), mounts)
            self.assertIn("/tmp", mounts)
            annotations = workload["spec"]["template"]["metadata"][
                "annotations"]
            self.assertEqual(annotations["prometheus.io/scrape"], "true")
            self.assertEqual(int(annotations["prometheus.io/port"]),
                             ports["metrics"])
            # Its Service (or the headless one) selects it and names both
            # ports, the ServiceMonitor scrapes `metrics`.
            service = headless if workload is stage_set else coordinator_service
            self.assertTrue(all(labels.get(k) == v for k, v in
                                service["spec"]["selector"].items()))
            self.assertEqual(sorted(p["name"] for p in service["spec"]["ports"]),
                             ["grpc", "metrics"])
            (monitor,) = find(objects, "ServiceMonitor")
            self.assertTrue(all(
                service["metadata"]["labels"].get(k) == v for k, v in
                monitor["spec"]["selector"]["matchLabels"].items()))
            self.assertEqual(monitor["spec"]["endpoints"][0]["port"], "metrics")
            # A NetworkPolicy selects it.
            self.assertTrue(any(
                all(labels.get(k) == v for k, v in
                    p["spec"]["podSelector"].get("matchLabels", {}).items())
                and p["spec"]["podSelector"].get("matchLabels")
                for p in find(objects, "NetworkPolicy")))
            for volume in pod["volumes"]:
                if "persistentVolumeClaim" in volume:
                    self.assertIn(volume["persistentVolumeClaim"]["claimName"],
                                  claims)
        self.assertEqual(
            stage_set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
            "state")

        self.check_tls(objects, stage_set, coordinator)

        # Stages accept gRPC only from stages and the coordinator.
        (stage_policy,) = find(objects, "NetworkPolicy", "petra-stage")
        grpc_rules = [r for r in stage_policy["spec"]["ingress"]
                      if any(p["port"] == "grpc" for p in r["ports"])]
        (grpc_rule,) = grpc_rules
        components = sorted(f["podSelector"]["matchLabels"][
            "app.kubernetes.io/component"] for f in grpc_rule["from"])
        self.assertEqual(components, ["coordinator", "stage"])

        # The dashboard ConfigMap is the dashboard file, labelled for the
        # Grafana sidecar.
        (dashboard,) = find(objects, "ConfigMap", "petra-grafana-dashboard")
        self.assertEqual(dashboard["metadata"]["labels"]["grafana_dashboard"],
                         "1")
        with open(DASHBOARD) as f:
            self.assertEqual(json.loads(dashboard["data"]["petra-fleet.json"]),
                             json.load(f))
        return objects, stage_set, coordinator

    def secret_mounts(self, workload, secrets=None):
        """{mount path: {key: file}} of the container's Secret volumes, the
        files from make-certs.sh's `secrets` (or None when not given)."""
        pod = workload["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        by_volume = {v["name"]: v["secret"]["secretName"]
                     for v in pod["volumes"] if "secret" in v}
        mounts = {}
        for m in container["volumeMounts"]:
            if m["name"] in by_volume:
                self.assertTrue(m.get("readOnly"), m["mountPath"])
                name = by_volume[m["name"]]
                if secrets is not None:
                    self.assertIn(name, secrets,
                                  "the manifests mount Secret %s, which "
                                  "scripts/make-certs.sh does not make" % name)
                mounts[m["mountPath"]] = secrets[name] if secrets else name
        return mounts

    def check_tls(self, objects, stage_set, coordinator):
        """Every gRPC connection is mutual TLS from Secrets that
        scripts/make-certs.sh makes; the coordinator needs a token; the
        stages take control calls from the coordinator's certificate."""
        with tempfile.TemporaryDirectory() as out:
            secrets = make_certs(os.path.join(out, "certs"))
            for workload, name in ((stage_set, "stage-server"),
                                   (coordinator, "coordinator")):
                command = container_command(objects, workload, name)
                mounts = self.secret_mounts(workload, secrets)
                flags = ["tls-cert", "tls-key", "tls-ca"]
                if workload is coordinator:
                    flags.append("auth-token-file")
                for flag in flags:
                    value = flag_value(command[1:], flag)
                    self.assertIsNotNone(value, "%s has no --%s" % (name, flag))
                    (local,) = localize([value], mounts)
                    self.assertNotEqual(local, value,
                                        "%s --%s=%s is on no Secret mount" %
                                        (name, flag, value))
                    self.assertTrue(os.path.isfile(local), local)
                if workload is coordinator:
                    (cert,) = localize([flag_value(command[1:], "tls-cert")],
                                       mounts)
            _, subject, _ = run(["openssl", "x509", "-noout", "-subject",
                                 "-nameopt", "multiline", "-in", cert])
        cn = re.search(r"commonName\s*=\s*(\S+)", subject).group(1)
        stage_command = container_command(objects, stage_set, "stage-server")
        self.assertEqual(flag_value(stage_command[1:], "coordinator-identity"),
                         cn)

    def test_cpu_overlay_renders_and_validates(self):
        objects, stage_set, _ = self.check_overlay("cpu")
        command = container_command(objects, stage_set, "stage-server")
        self.assertEqual(flag_value(command[1:], "device"), "cpu")

    def test_gpu_overlay_renders_and_validates(self):
        objects, stage_set, _ = self.check_overlay("gpu")
        (container,) = stage_set["spec"]["template"]["spec"]["containers"]
        for bound in ("requests", "limits"):
            self.assertEqual(
                int(container["resources"][bound]["nvidia.com/gpu"]), 1)
        self.assertTrue(container["image"].endswith(":cuda"))
        command = container_command(objects, stage_set, "stage-server")
        self.assertEqual(flag_value(command[1:], "device"), "cuda")
        # This CPU-only build must refuse the GPU stage's flags clearly: the
        # flags parse, the device does not exist here.
        args = with_flag(command[1:], "listen", "127.0.0.1:0")
        args = with_flag(args, "metrics-listen", "")
        with tempfile.TemporaryDirectory() as state:
            args = with_flag(args, "state-dir", state)
            code, out, err = run([os.path.join(BIN, command[0])] + args,
                                 check=False, timeout=60)
        self.assertEqual(code, 1, out + err)
        self.assertIn("no CUDA", err)

    def test_launch_rendered_commands(self):
        objects = kustomize("cpu")
        (stage_set,) = find(objects, "StatefulSet", "petra-stage")
        (coordinator,) = find(objects, "Deployment", "petra-coordinator")
        certs = tempfile.mkdtemp(prefix="petra-certs-")
        secrets = make_certs(os.path.join(certs, "out"))
        stage_mounts = self.secret_mounts(stage_set, secrets)
        coordinator_mounts = self.secret_mounts(coordinator, secrets)
        name = stage_set["metadata"]["name"]
        stage_command = localize(
            container_command(objects, stage_set, "stage-server"),
            stage_mounts)
        stages = [("%s-%d" % (name, i), stage_command)
                  for i in range(stage_set["spec"]["replicas"])]
        checks = {}
        for n, workload, mounts in [(s, stage_set, stage_mounts)
                                    for s, _ in stages] + [
                ("coordinator", coordinator, coordinator_mounts)]:
            (c,) = workload["spec"]["template"]["spec"]["containers"]
            check = localize(c["readinessProbe"]["exec"]["command"], mounts)
            port = int(flag_value(check, "address").rsplit(":", 1)[1])
            checks[n] = (port, check)
        self.launch_and_train(
            stages,
            localize(container_command(objects, coordinator, "coordinator"),
                     coordinator_mounts),
            checks, client=client_flags(os.path.join(certs, "out")))


class DockerfileTest(unittest.TestCase):
    def instructions(self):
        """(instruction, arguments) pairs, continuation lines joined."""
        with open(os.path.join(DEPLOY, "docker", "Dockerfile")) as f:
            text = re.sub(r"\\\n", " ", f.read())
        out = []
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                word, _, rest = line.partition(" ")
                out.append((word.upper(), rest.strip()))
        return out

    def test_builds_with_the_readme_scripts(self):
        steps = self.instructions()
        stages = [rest for word, rest in steps if word == "FROM"]
        self.assertEqual(len(stages), 2, "a build and a runtime stage")
        self.assertIn("debian:bookworm", "".join(
            rest for word, rest in steps if word == "ARG"))
        runs = [rest for word, rest in steps if word == "RUN"]
        self.assertTrue(any("scripts/install-deps.sh" in r for r in runs))
        self.assertTrue(any("scripts/build.sh" in r for r in runs))
        self.assertTrue(any("scripts/runtime-packages.sh" in r for r in runs))
        # Every file COPY takes from the build context exists.
        for word, rest in steps:
            if word == "COPY" and not rest.startswith("--from"):
                source = rest.split()[0]
                self.assertTrue(os.path.exists(os.path.join(SOURCE, source)),
                                source)
        # Only the runtime stage's user runs the programs: non-root, and the
        # uid Kubernetes' securityContext names.
        (user,) = [rest for word, rest in steps if word == "USER"]
        self.assertEqual(user.split(":")[0], str(IMAGE_UID))

    def test_installed_programs_and_runtime_packages(self):
        # What `cmake --install` puts in the image: the three programs.
        with tempfile.TemporaryDirectory() as prefix:
            build = os.path.dirname(BIN)
            run(["cmake", "--install", build, "--prefix", prefix])
            installed = sorted(os.listdir(os.path.join(prefix, "bin")))
            self.assertEqual(installed, sorted(PETRA_PROGRAMS))
            programs = [os.path.join(prefix, "bin", p) for p in installed]
            _, out, _ = run(["bash", os.path.join(SOURCE, "scripts",
                                                  "runtime-packages.sh")] +
                            programs)
        packages = out.split()
        for expected in ("libtorch1.13", "libgrpc++1.51", "libprotobuf32"):
            self.assertIn(expected, packages)
        for package in packages:
            code, status, _ = run(["dpkg-query", "-W", "-f=${Status}",
                                   package], check=False)
            self.assertEqual(status, "install ok installed", package)

    def test_health_check_and_command_run(self):
        steps = self.instructions()
        (cmd,) = [json.loads(rest) for word, rest in steps if word == "CMD"]
        (health,) = [rest for word, rest in steps if word == "HEALTHCHECK"]
        health = json.loads(health[health.index("CMD") + 3:].strip())
        workdir = tempfile.mkdtemp(prefix="petra-docker-")
        fleet = Fleet(self, workdir)
        try:
            grpc_port, metrics_port = fleet.start("stage", cmd)
            self.assertIsNotNone(metrics_port)
            manifest_port = int(flag_value(health, "address").rsplit(":")[1])
            self.assertEqual(manifest_port,
                             int(flag_value(cmd[1:], "listen").split(":")[1]))
            check = with_flag(health, "address", "127.0.0.1:%d" % grpc_port)
            run([os.path.join(BIN, check[0])] + check[1:])
        finally:
            fleet.stop()


if __name__ == "__main__":
    for name in ("PETRA_SOURCE_DIR", "PETRA_BIN_DIR"):
        if not os.environ.get(name):
            sys.exit("deploy_test.py: set %s (CTest does)" % name)
    unittest.main()
