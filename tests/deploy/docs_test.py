"""The documented commands: README's fleet by hand runs as written (on free
ports, in a scratch folder), and every documented `petra submit` makes a
valid job spec. The deploy walk-throughs run in compose_test.py and
kubernetes_test.py.
"""

import os
import re
import shlex
import socket
import subprocess
import tempfile
import unittest

from harness import (BIN, DEPLOY_DOC, README, SHORTER, SOURCE,
                     documented_block, main, run)

DOCS = [README, DEPLOY_DOC] + [
    os.path.join(SOURCE, "docs", f)
    for f in sorted(os.listdir(os.path.join(SOURCE, "docs")))
    if f.endswith(".md") and f != "DEPLOY.md"]
# The client's own flags, which a spec has no field for.
CLIENT_FLAGS = {"--coordinator": 1, "--watch": 0, "--json": 0,
                "--tls-ca": 1, "--tls-cert": 1, "--tls-key": 1,
                "--auth-token-file": 1}


def free_ports(n):
    """n consecutive free loopback ports (the README's {a..b} ranges need
    them consecutive)."""
    for _ in range(200):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
        probe.close()
        if base + n > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return list(range(base, base + n))
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError("no %d consecutive free ports" % n)


def code_lines(path):
    """The lines of a Markdown file's indented code blocks, continuations
    joined (a fenced block, such as a picture, is not a command)."""
    lines, pending, fenced = [], "", False
    with open(path) as f:
        for line in f:
            if line.startswith("```"):
                fenced = not fenced
                continue
            if fenced or not line.startswith("    "):
                pending = ""
                continue
            text = line[4:].rstrip("\n")
            if text.rstrip().endswith("\\"):
                pending += text.rstrip()[:-1] + " "
                continue
            lines.append(pending + text)
            pending = ""
    return lines


class DocsTest(unittest.TestCase):
    def test_readme_fleet_by_hand_runs_as_written(self):
        commands = documented_block(README, "### Running a fleet by hand")
        scratch = tempfile.mkdtemp(prefix="petra-readme-")
        ports = dict(zip(("50050", "50051", "50052", "9450"), free_ports(4)))

        def local(word):
            # The documented state folder first: the build may itself live
            # under /tmp (a CI clone in /tmp/petra-ci).
            word = word.replace("/tmp/petra/", os.path.join(scratch, "state/"))
            word = word.replace("build/bin/", BIN + "/")
            for documented, port in ports.items():
                word = word.replace(documented, str(port))
            return word

        script = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null' EXIT",
                  "export PETRA_COORDINATOR=127.0.0.1:%d" % ports["50050"]]
        servers_up = False
        for words in commands:
            words = [local(w) for w in words]
            if words[-1] == "&":
                script.append(shlex.join(words[:-1]) + " &")
                continue
            if not servers_up:
                # Where a person waits a moment, the script asks.
                for port in (ports["50051"], ports["50052"], ports["50050"]):
                    health = "%s/petra-health --address 127.0.0.1:%d" % (
                        BIN, port)
                    script.append(
                        "for i in $(seq 100); do %s >/dev/null 2>&1 && break;"
                        " sleep 0.2; done; %s >/dev/null" % (health, health))
                servers_up = True
            if words[1] == "submit":
                words += SHORTER
            script.append(shlex.join(words))
        # The README's own shell syntax ({a..b} and quotes) is what runs.
        text = "\n".join(script)
        for documented in ("'127.0.0.1:{50051..50052}'",):
            self.assertIn(local(documented), text)
        result = subprocess.run(["bash", "-c", text], capture_output=True,
                                text=True, timeout=600, cwd=scratch)
        self.assertEqual(result.returncode, 0,
                         "the README's block failed:\n%s\n%s%s" %
                         (text, result.stdout, result.stderr))
        self.assertRegex(result.stdout, r"job-1 +succeeded")
        self.assertTrue(os.path.isfile(os.path.join(scratch, "model.pt")))

    def test_every_documented_submit_makes_a_valid_spec(self):
        checked = 0
        for path in DOCS:
            for line in code_lines(path):
                if not re.match(r"\s*(build/bin/)?petra submit ", line):
                    continue
                words = shlex.split(line, comments=True)
                if len(words) < 2 or not re.fullmatch(
                        r"(build/bin/)?petra", words[0]) or \
                        words[1] != "submit":
                    continue
                args, i = [], 2
                while i < len(words):
                    skip = CLIENT_FLAGS.get(words[i])
                    if skip is None:
                        args.append(words[i])
                        i += 1
                    else:
                        i += 1 + skip
                code, out, err = run([os.path.join(BIN, "petra"), "spec"] +
                                     args, check=False)
                self.assertEqual(code, 0, "%s: `%s` is not a valid job: %s"
                                 % (os.path.basename(path), line, err))
                checked += 1
        self.assertGreaterEqual(checked, 4)

    def test_every_readme_command_parses(self):
        """Every command the README shows, beyond the block run above: a
        petra program's command exists and takes every flag the line
        gives, a script or file it names is in the repository, the Python
        parses. A command of a kind this test does not know fails it, so a
        new one cannot slip by unchecked."""
        helps = {}

        def help_of(program, command):
            key = (program, command)
            if key not in helps:
                args = [os.path.join(BIN, program)] + (
                    [command] if command else []) + ["--help"]
                code, out, err = run(args, check=False)
                self.assertEqual(code, 0, "%s: %s" % (" ".join(args), err))
                helps[key] = out
            return helps[key]

        def exists(path, where=SOURCE):
            self.assertTrue(os.path.exists(os.path.join(where, path)),
                            "README names %s, which is not in the "
                            "repository" % path)

        python, checked = [], 0
        for line in code_lines(README):
            if re.match(r"(import |\w+ = |\w+\.\w+\()", line.strip()):
                python.append(line.split("  #")[0].strip())
                continue
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[-1] == "&":
                words = words[:-1]
            program = os.path.basename(words[0])
            checked += 1
            if program == "bash":
                exists(words[1])
            elif program.startswith("petra"):
                command = "" if program != "petra" else words[1]
                text = help_of(program, command)
                for w in words[1:]:
                    if w.startswith("--"):
                        self.assertIn(w.split("=")[0], text,
                                      "README: `%s`" % line)
            elif program == "docker":
                exists(words[words.index("-f") + 1])
            elif program == "cd":
                # The compose line: the folder and, after it, its file.
                exists(os.path.join(words[1], "docker-compose.yml"))
            elif program == "kubectl":
                exists(words[words.index("-k") + 1])
            elif program == "python3" and words[1:3] == ["-m", "venv"]:
                pass
            elif program == "pip":
                exists(words[-1])
            else:
                self.fail("README shows `%s`, a command this test does not "
                          "know: teach it" % line)
        compile("\n".join(python), "README.md", "exec")
        self.assertGreaterEqual(len(python), 4)
        self.assertGreaterEqual(checked, 15)


if __name__ == "__main__":
    main()
