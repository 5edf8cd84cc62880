"""The fleet a chaos run starts (chaos.py): a coordinator, stage servers
and a spare as separate processes on loopback, each stage server behind a
fault-injecting proxy (tests/netns/faultproxy.py), every state directory
on a tmpfs of its own where mounting is allowed; started, stopped and
restarted on the same ports and folders as the faults need.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROXY = os.path.join(ROOT, "tests", "netns", "faultproxy.py")


class CampaignError(Exception):
    pass


def wait_for_text(path, pattern, timeout=60, proc=None):
    """The first match of `pattern` in the log at `path`; raises when it does
    not come within `timeout` s or `proc` exits first (a port taken, a crash),
    with the log's tail, so a failed start says why."""
    deadline = time.time() + timeout
    while True:
        text = ""
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            pass
        m = re.search(pattern, text)
        if m:
            return m
        if proc is not None and proc.poll() is not None:
            why = f"exited with {proc.returncode}"
        elif time.time() >= deadline:
            why = f"not after {timeout} s"
        else:
            time.sleep(0.1)
            continue
        tail = "\n".join(text.splitlines()[-10:])
        raise CampaignError(f"no {pattern!r} in {path}: {why}; its log ends:\n"
                            f"{tail}")


class Fleet:
    """The processes of one run, each restartable on its port and state."""

    def __init__(self, bin_dir, root, use_tmpfs, servers=3):
        self.bin = bin_dir
        # The jobs' stage servers and one spare.
        self.servers = [f"stage-{j}" for j in range(servers)]
        self.root = root
        self.procs = {}
        self.commands = {}
        self.mounts = []
        self.use_tmpfs = use_tmpfs
        self.controls = {}
        # Every process binds port 0 at its first start and reports the port
        # it got; restarts reuse it. Ports picked here and bound later could be
        # taken in between by a test running beside this one.
        self.ports = {}
        self.proxy_ports = {}

    def state_dir(self, name):
        path = os.path.join(self.root, "state", name)
        os.makedirs(path, exist_ok=True)
        if self.use_tmpfs and path not in self.mounts:
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m",
                                "tmpfs", path], capture_output=True)
            if r.returncode == 0:
                self.mounts.append(path)
        return path

    def start(self, name):
        log = open(os.path.join(self.root, f"{name}.log"), "a")
        self.procs[name] = subprocess.Popen(self.commands[name], stdout=log,
                                            stderr=subprocess.STDOUT)
        log.close()
        self.pids = getattr(self, "pids", []) + [self.procs[name].pid]

    def start_on_free_port(self, name, command, pattern):
        """Starts `name` from command(port) on port 0, reads the port it
        reports (group 1 of `pattern`) and keeps the command on that port
        for restarts."""
        self.commands[name] = command(0)
        self.start(name)
        m = wait_for_text(os.path.join(self.root, f"{name}.log"), pattern,
                          proc=self.procs[name])
        port = int(m.group(1))
        self.commands[name] = command(port)
        return port

    def start_servers(self):
        for j, name in enumerate(self.servers):
            self.ports[name] = self.start_on_free_port(
                name, lambda port: [
                    os.path.join(self.bin, "petra-stage-server"), "--listen",
                    f"127.0.0.1:{port}", "--metrics-listen", "",
                    "--threads", "1", "--drain-seconds", "5", "--insecure",
                    "--state-dir", self.state_dir(name)],
                r"listening on port (\d+)")
            control = os.path.join(self.root, f"faults-{name}.json")
            self.controls[name] = control
            self.set_faults(name)
            self.proxy_ports[name] = self.start_on_free_port(
                "proxy-" + name, lambda port: [
                    sys.executable, PROXY, "--listen", f"127.0.0.1:{port}",
                    "--target", f"127.0.0.1:{self.ports[name]}", "--control",
                    control, "--seed", str(j)],
                r"faultproxy listening on [^:]+:(\d+)")
        stages = ",".join(f"127.0.0.1:{self.proxy_ports[n]}"
                          for n in self.servers)
        self.ports["coordinator"] = self.start_on_free_port(
            "coordinator", lambda port: [
                os.path.join(self.bin, "petra-coordinator"), "--listen",
                f"127.0.0.1:{port}", "--metrics-listen", "",
                "--stages", stages, "--data-root", "/usr/share/datasets",
                "--state-dir", self.state_dir("coordinator"),
                "--recovery-timeout", "30", "--max-recoveries", "6"],
            r"listening on port (\d+)")

    def wait_coordinator(self):
        log = os.path.join(self.root, "coordinator.log")
        deadline = time.time() + 60
        while time.time() < deadline:
            with open(log) as f:
                if f.read().count("listening on port") >= self.coordinator_starts():
                    return
            time.sleep(0.1)
        raise CampaignError("the coordinator did not start")

    def coordinator_starts(self):
        return getattr(self, "_coordinator_starts", 1)

    def restart(self, name):
        """Starts `name` again once it has exited; False while it has not
        (a server still draining after SIGTERM)."""
        p = self.procs.get(name)
        if p is not None and p.poll() is None:
            return False
        if name == "coordinator":
            self._coordinator_starts = self.coordinator_starts() + 1
        self.start(name)
        if name == "coordinator":
            self.wait_coordinator()
        return True

    def set_faults(self, name, **faults):
        path = self.controls[name]
        with open(path + ".new", "w") as f:
            json.dump(faults, f)
        os.replace(path + ".new", path)

    def petra(self, args, timeout=60):
        return subprocess.run(
            [os.path.join(self.bin, "petra")] + args[:1] +
            ["--coordinator", f"127.0.0.1:{self.ports['coordinator']}"] +
            args[1:], capture_output=True, text=True, timeout=timeout)

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.terminate()
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for path in self.mounts:
            subprocess.run(["umount", "-l", path], capture_output=True)
