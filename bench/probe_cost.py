#!/usr/bin/python3
"""What one health probe costs: `petra health` (the client; it linked
libtorch until petra-local took the commands that build networks) against
`petra-health` (gRPC only), each run --runs times against
a stage server on loopback: wall seconds, CPU seconds (user + system) and
peak resident memory, the medians (from wait4's resource usage).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import BenchError, main_guard

HERE = os.path.dirname(os.path.abspath(__file__))


def start_stage(bin_dir, state):
    p = subprocess.Popen(
        [os.path.join(bin_dir, "petra-stage-server"), "--listen",
         "127.0.0.1:0", "--metrics-listen", "", "--insecure", "--state-dir",
         state],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 60
    for line in p.stdout:
        m = re.search(r"listening on port (\d+)", line)
        if m:
            return p, int(m.group(1))
        if time.time() > deadline:
            break
    p.kill()
    raise BenchError("the stage server did not start")


def measure(argv, runs):
    rows = []
    for _ in range(runs):
        start = time.time()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.time() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise BenchError(f"{' '.join(argv)} failed: "
                             f"{p.stderr.read().decode()[-500:]}")
        rows.append((wall, usage.ru_utime + usage.ru_stime,
                     usage.ru_maxrss / 1024))
    return [statistics.median(c) for c in zip(*rows)]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", default=os.path.join(os.path.dirname(HERE),
                                                     "build", "bin"))
    p.add_argument("--runs", type=int, default=10)
    a = p.parse_args(argv)
    if a.runs < 1:
        p.error("--runs must be at least 1")
    for program in ("petra", "petra-health", "petra-stage-server"):
        if not os.access(os.path.join(a.bin_dir, program), os.X_OK):
            p.error(f"--bin-dir: no {program} in {a.bin_dir}")
    with tempfile.TemporaryDirectory(prefix="petra-probe-") as state:
        server, port = start_stage(a.bin_dir, state)
        try:
            address = ["--address", f"127.0.0.1:{port}"]
            probes = [
                ("petra health (the client)",
                 [os.path.join(a.bin_dir, "petra"), "health"] + address),
                ("petra-health (after)",
                 [os.path.join(a.bin_dir, "petra-health")] + address),
            ]
            print(f"median of {a.runs} probes of an idle stage server on "
                  "loopback\n")
            print("| probe | wall seconds | CPU seconds | peak RSS |")
            print("|---|---:|---:|---:|")
            for label, cmd in probes:
                wall, cpu, rss = measure(cmd, a.runs)
                print(f"| {label} | {wall:.3f} | {cpu:.3f} | {rss:.0f} MB |")
        finally:
            server.terminate()
            server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    main_guard("probe_cost.py", main)
