"""docs/DEPLOY.md's Kubernetes walk-through, read as a reader follows it:
the Secrets the manifests mount are created in order before the overlay is
applied, the client has the certificate and token the base needs, and the
overlay it writes names the image it pushed (kustomize's images:).
"""

import os
import re
import tempfile
import unittest

from harness import DEPLOY, DEPLOY_DOC, SOURCE, main
from k8s_render import ManifestChecks, find, kustomize, render


class KubernetesDocTest(unittest.TestCase, ManifestChecks):
    def test_deploy_doc_walks_a_fresh_cluster_in_order(self):
        """docs/DEPLOY.md's Kubernetes steps, read top to bottom: every
        Secret the manifests mount is created before the overlay is applied,
        and the client then has the certificate and token the base needs."""
        with open(os.path.join(SOURCE, "docs", "DEPLOY.md")) as f:
            doc = f.read()
        section = doc.split("\n## Kubernetes\n", 1)[1].split("\n## ", 1)[0]
        steps = "\n".join(line[4:] for line in section.splitlines()
                          if line.startswith("    "))
        lines = [l for l in steps.splitlines() if l.strip()
                 and not l.lstrip().startswith("#")]
        at = {}
        for i, line in enumerate(lines):
            for key in ("make-certs.sh", "create namespace", "kubectl apply",
                        "petra submit"):
                if key in line and key not in at:
                    at[key] = i
        for key in ("make-certs.sh", "create namespace", "kubectl apply",
                    "petra submit"):
            self.assertIn(key, at, "DEPLOY.md's Kubernetes steps lack " + key)
        created = {}
        for i, line in enumerate(lines):
            m = re.search(r"create secret generic (\S+)", line)
            if m:
                created[m.group(1)] = i
        objects = kustomize("cpu")
        mounted = set()
        for workload in (find(objects, "StatefulSet", "petra-stage")[0],
                         find(objects, "Deployment", "petra-coordinator")[0]):
            mounted |= set(self.secret_mounts(workload).values())
        self.assertEqual(sorted(mounted - set(created)), [],
                         "Secrets the manifests mount but DEPLOY.md never "
                         "creates")
        self.assertTrue(all(at["create namespace"] < i < at["kubectl apply"]
                            for i in created.values()),
                        "the Secrets must be created after the namespace "
                        "and before the overlay is applied")
        self.assertLess(at["make-certs.sh"], min(created.values()))
        # The client: the TLS files and the token, as flags or exported
        # defaults, before it submits.
        before = "\n".join(lines[:at["petra submit"] + 1])
        for flag, env in (("--tls-ca", "PETRA_TLS_CA"),
                          ("--tls-cert", "PETRA_TLS_CERT"),
                          ("--tls-key", "PETRA_TLS_KEY"),
                          ("--auth-token-file", "PETRA_AUTH_TOKEN_FILE")):
            self.assertTrue(flag in lines[at["petra submit"]] or
                            re.search(r"export %s=\S+" % env, before),
                            "petra submit in DEPLOY.md has no %s" % flag)

    def test_deploy_doc_names_the_pushed_image_through_kustomize(self):
        """Step 0 of docs/DEPLOY.md's Kubernetes walk-through: the overlay
        it writes, with a registry and tag of the reader's, puts the image
        it pushed into every petra container; the base names the image
        scripts/compose-live.sh builds and runs."""
        with open(DEPLOY_DOC) as f:
            section = f.read().split("\n## Kubernetes\n", 1)[1]
        block = "\n".join(line[4:] for line in section.splitlines()
                          if line.startswith("    "))
        env = dict(re.findall(r"(\w+)=(\S+)",
                              re.search(r"export (REGISTRY=.*)", block)
                              .group(1)))
        pushed = re.search(r"docker push (\S+)", block).group(1)
        overlay = re.search(r"cat > my-fleet/kustomization.yaml <<EOF\n"
                            r"(.*?)\nEOF", block, re.S).group(1)
        for name, value in env.items():
            overlay = overlay.replace("$" + name, value)
            pushed = pushed.replace("$" + name, value)
        self.assertIn("kubectl apply -k my-fleet", block)
        # Where the reader runs it: the repository's root.
        with tempfile.TemporaryDirectory(dir=SOURCE) as root:
            os.mkdir(os.path.join(root, "my-fleet"))
            os.symlink(DEPLOY, os.path.join(root, "deploy"))
            with open(os.path.join(root, "my-fleet", "kustomization.yaml"),
                      "w") as f:
                f.write(overlay)
            objects = render(os.path.join(root, "my-fleet"))
        images = set()
        for workload in objects:
            if workload["kind"] not in ("Deployment", "StatefulSet"):
                continue
            pod = workload["spec"]["template"]["spec"]
            for c in pod.get("initContainers", []) + pod["containers"]:
                images.add(c["image"])
        self.assertEqual(images, {pushed})
        base = set()
        for workload in kustomize("cpu"):
            if workload["kind"] in ("Deployment", "StatefulSet"):
                base |= {c["image"] for c in
                         workload["spec"]["template"]["spec"]["containers"]}
        self.assertEqual(base, {"petra-fleet:latest"})
        with open(os.path.join(SOURCE, "scripts", "compose-live.sh")) as f:
            self.assertIn("-t petra-fleet:latest", f.read())


if __name__ == "__main__":
    main()
