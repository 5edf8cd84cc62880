"""What the Kubernetes tests share: the overlays rendered with kustomize,
objects found in them, a container's command with the ConfigMap's values
resolved, and the Secrets a workload mounts.
"""

import os
import re
import socket
import tempfile

import yaml

from harness import DEPLOY, KUSTOMIZE, run

# Fields kustomize has deprecated (kustomize 5 warns on each): none of the
# kustomizations may use them.
DEPRECATED_FIELDS = {"bases", "patchesStrategicMerge", "patchesJson6902",
                     "vars", "commonLabels", "imageTags"}


def render(path):
    """The objects kustomize renders from the kustomization in `path`."""
    if not os.access(KUSTOMIZE, os.X_OK):
        raise AssertionError(
            "kustomize not found at %r: run scripts/install-test-tools.sh"
            % KUSTOMIZE)
    out = run([KUSTOMIZE, "build", path])[1]
    return [d for d in yaml.safe_load_all(out) if d]


def kustomize(overlay):
    """The overlay's objects."""
    return render(os.path.join(DEPLOY, "k8s", "overlays", overlay))


def with_component(component):
    """The cpu overlay's objects with `component` added, in an overlay as
    docs/DEPLOY.md tells operators to write it."""
    with tempfile.TemporaryDirectory(dir=os.path.join(
            DEPLOY, "k8s", "overlays")) as overlay:
        with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
            f.write("apiVersion: kustomize.config.k8s.io/v1beta1\n"
                    "kind: Kustomization\n"
                    "resources:\n  - ../cpu\n"
                    "components:\n"
                    "  - ../../components/%s\n" % component)
        return render(overlay)


def free_port_pair():
    """A loopback port P with P + 1 free too (the launcher's second server)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no two consecutive free ports on loopback")


def find(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    if not found:
        raise AssertionError("no %s %s in the rendered manifests" %
                             (kind, name or ""))
    return found


def container_command(objects, workload, container, pod_name=None):
    """[program, args...] with $(VAR) references resolved from the
    container's env (values, ConfigMap keys, and the pod's name, `pod_name` or
    the workload's first: <name>-0), as the kubelet does."""
    pod = workload["spec"]["template"]["spec"]
    c = [c for c in pod["containers"] if c["name"] == container][0]
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e["valueFrom"]:
            field = e["valueFrom"]["fieldRef"]["fieldPath"]
            if field != "metadata.name":
                raise AssertionError("%s reads field %s" % (container, field))
            env[e["name"]] = pod_name or workload["metadata"]["name"] + "-0"
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


class ManifestChecks:
    """Checks on rendered workloads, for unittest.TestCase classes."""

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
