"""docker-compose: the compose file and its GPU and TLS overrides render with
Debian's docker-compose, Prometheus scrapes every process they start, and
the commands they give the coordinator and the stage servers run a short
job on loopback.
"""

import os
import posixpath
import shlex
import shutil
import tempfile
import unittest

import yaml

from harness import (COMPOSE, COMPOSE_DIR, DASHBOARD, DEPLOY, DEPLOY_DOC,
                     README, FleetLaunch, PETRA_PROGRAMS, PROMTOOL,
                     client_flags, documented_block, flag_value, localize,
                     main, make_certs, petra_lines, run)


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


def launch_plan(services, local):
    """The stage servers' commands by service name, and each petra
    service's (port, health check command); `local(service, args)` rewrites
    a command for this machine."""
    stages = sorted((n, local(s, s["command"])) for n, s in services.items()
                    if is_petra(s) and s["command"][0] == "petra-stage-server")
    checks = {}
    for name, service in services.items():
        if is_petra(service):
            port = int(flag_value(service["command"][1:],
                                  "listen").rsplit(":", 1)[1])
            checks[name] = (port,
                            local(service, service["healthcheck"]["test"][1:]))
    return stages, checks


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
            # State on a volume at the program's --state-dir: the
            # coordinator's named, each stage container's its own (an
            # anonymous one), so that a stage service scales.
            state_dir = flag_value(service["command"][1:], "state-dir")
            mounts = {v.split(":")[1] if ":" in v else v:
                      v.split(":")[0] if ":" in v else None
                      for v in service["volumes"]}
            self.assertIn(state_dir, mounts, name)
            if name == "coordinator":
                self.assertIn(mounts[state_dir], config["volumes"], name)
            else:
                self.assertIsNone(mounts[state_dir], name)
                # It joins the coordinator's fleet by itself, and scales
                # (no fixed host port, no container name).
                self.assertEqual(flag_value(service["command"][1:],
                                            "coordinator"),
                                 "coordinator:%s" % flag_value(
                                     services["coordinator"]["command"][1:],
                                     "listen").rsplit(":", 1)[1])
                self.assertNotIn("ports", service, name)
                self.assertNotIn("container_name", service, name)
            self.assertEqual(service["healthcheck"]["test"][0], "CMD")
        self.assertIsNone(flag_value(services["coordinator"]["command"][1:],
                                     "stages"))
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
                if ":" in volume and source.startswith("/"):
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

    def test_gpu_host_override_renders(self):
        # One host: every stage container sees all the GPUs, its own first
        # (pinned by CUDA_VISIBLE_DEVICES, a different one each), and every
        # petra container shares the host's IPC namespace.
        config = compose_config("docker-compose.yml",
                                "docker-compose.gpu-host.yml",
                                env={"PETRA_DEVICE": "cuda",
                                     "PETRA_IMAGE": "petra-fleet:cuda"})
        firsts = []
        for name, service in config["services"].items():
            if not is_petra(service):
                self.assertNotIn("ipc", service, name)
                continue
            self.assertEqual(service.get("ipc"), "host", name)
            if service["command"][0] != "petra-stage-server":
                continue
            self.assertEqual(flag_value(service["command"][1:], "device"),
                             "cuda")
            (device,) = service["deploy"]["resources"]["reservations"][
                "devices"]
            self.assertIn("gpu", device["capabilities"])
            self.assertEqual(device["count"], "all")
            visible = service["environment"]["CUDA_VISIBLE_DEVICES"].split(",")
            self.assertEqual(sorted(visible), ["0", "1"], name)
            firsts.append(visible[0])
        self.assertEqual(sorted(firsts), ["0", "1"], "stages share a GPU")

    def test_shm_override_renders(self):
        # Every petra container shares the host's /dev/shm, so auto picks
        # shared memory for every link; the others are left as they were.
        config = compose_config("docker-compose.yml", "docker-compose.shm.yml")
        for name, service in config["services"].items():
            if is_petra(service):
                self.assertEqual(service.get("ipc"), "host", name)
            else:
                self.assertNotIn("ipc", service, name)

    def test_prometheus_scrapes_every_process(self):
        path = os.path.join(COMPOSE_DIR, "prometheus.yml")
        with open(path) as f:
            prometheus = yaml.safe_load(f)
        # The rule files as the container sees them: mounted beside it.
        services = compose_config("docker-compose.yml")["services"]
        mounts = {}  # container path -> host path, "source:target:mode"
        for v in services["prometheus"]["volumes"]:
            parts = v.split(":")
            if len(parts) >= 2:
                mounts[parts[1]] = parts[0]
        with tempfile.TemporaryDirectory() as etc:
            shutil.copy(path, os.path.join(etc, "prometheus.yml"))
            for rules in prometheus["rule_files"]:
                target = posixpath.join("/etc/prometheus", rules)
                self.assertIn(target, mounts, "%s is not mounted" % rules)
                shutil.copy(mounts[target], os.path.join(etc, rules))
            run([PROMTOOL, "check", "config",
                 os.path.join(etc, "prometheus.yml")])
        # Static targets, and DNS names with their port (every container
        # of a scaled service).
        targets = {t for job in prometheus["scrape_configs"]
                   for sc in job.get("static_configs", [])
                   for t in sc["targets"]}
        targets |= {"%s:%d" % (n, sd["port"])
                    for job in prometheus["scrape_configs"]
                    for sd in job.get("dns_sd_configs", [])
                    for n in sd["names"]}
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
            # The base command, unchanged but for the plaintext stages'
            # --insecure (the TLS flags lock them), then the TLS flags.
            locked = [a for a in base[name]["command"] if a != "--insecure"]
            self.assertEqual(command[:len(locked)], locked, name)
            self.assertNotIn("--insecure", command, name)
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
        # Each stage registers under its service's name, which its
        # certificate carries; only a stage's certificate may register.
        for name in ("stage-0", "stage-1"):
            self.assertEqual(flag_value(services[name]["command"][1:],
                                        "advertise-address"), name)
        self.assertEqual(flag_value(services["coordinator"]["command"][1:],
                                    "stage-identity"), "petra-stage")

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
        stages, checks = launch_plan(services, local)
        coordinator = services["coordinator"]
        self.launch_and_train(stages,
                              local(coordinator, coordinator["command"]),
                              checks, client=client_flags(certs))

    def test_launch_rendered_commands(self):
        # The fleet the compose file starts, driven by docs/DEPLOY.md's
        # walk-through as written (its `petra` lines).
        services = compose_config("docker-compose.yml")["services"]
        stages, checks = launch_plan(services, lambda s, args: args)
        self.launch_and_train(
            stages, services["coordinator"]["command"], checks,
            walkthrough=documented_block(DEPLOY_DOC,
                                         "## docker-compose (one machine)"))

    def test_every_copy_of_the_walkthrough_agrees(self):
        # The README's deploying section and the compose file's header give
        # the client commands that test_launch_rendered_commands runs.
        tested = petra_lines(documented_block(
            DEPLOY_DOC, "## docker-compose (one machine)"))
        self.assertEqual(
            petra_lines(documented_block(README, "## Deploying")), tested)
        with open(os.path.join(COMPOSE_DIR, "docker-compose.yml")) as f:
            header = [line[1:].strip() for line in f
                      if line.startswith("#   petra ")]
        self.assertEqual([shlex.split(line) for line in header], tested)


if __name__ == "__main__":
    main()
