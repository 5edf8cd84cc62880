"""The container image: the Dockerfile builds with the README's scripts,
installs the programs with their runtime packages, and its health check
(petra-health, which loads no libtorch) and command run.
"""

import json
import os
import re
import tempfile
import unittest

from harness import (BIN, DEPLOY, Fleet, IMAGE_UID, PETRA_PROGRAMS, SOURCE,
                     flag_value, main, run, with_flag)


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
        # A build stage or the binaries of a build on the host (BINARIES),
        # then the one runtime stage.
        self.assertEqual([s.split()[-1] for s in stages],
                         ["build", "prebuilt", "binaries", "runtime"])
        self.assertIn("ARG BINARIES=build", "\n".join(
            "%s %s" % step for step in steps))
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
        # What `cmake --install` puts in the image: the programs.
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
        # The probe, run every few seconds in every container, loads no
        # libtorch; nor does the client, which leaves what builds networks
        # to petra-local.
        for program in ("petra-health", "petra"):
            _, libraries, _ = run(["ldd", os.path.join(BIN, program)])
            self.assertNotIn("libtorch", libraries, program)
            self.assertNotIn("libc10", libraries, program)
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
    main()
