#!/usr/bin/python3
"""bench/cpu_quota.py holds a process to its share: a busy loop under a
quota of 0.2 of a core for 1.5 s of wall time gets at most about 0.3 s of
CPU, its cgroup counts the periods it was held back, and close() leaves no
cgroup behind. Exits 77 (CTest's skip) where no quota can be set here."""

import os
import resource
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import BenchError  # noqa: E402
from cpu_quota import CpuQuotas  # noqa: E402


def main():
    try:
        quotas = CpuQuotas(0.2, 1, "petra-quota-test")
    except BenchError as e:
        print(f"skipped: {e}")
        return 77
    paths = list(quotas.paths)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy = subprocess.Popen(quotas.prefix(0) + [
            sys.executable, "-c",
            "import time\nend = time.time() + 1.5\n"
            "while time.time() < end: pass"])
        busy.wait(timeout=60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime -
                                                     before.ru_stime)
        held = quotas.throttled(0)
    finally:
        quotas.close()
    print(f"1.5 s of a busy loop held to 0.2 of a core: {cpu:.2f} s of CPU, "
          f"held back in {held} periods")
    failures = []
    if busy.returncode != 0:
        failures.append(f"the busy loop exited {busy.returncode}")
    if cpu > 0.6:  # 0.3 s, the interpreter's start, and some slack
        failures.append(f"it had {cpu:.2f} s of CPU, above its quota")
    if held < 1:
        failures.append("its cgroup counted no period held back")
    left = [p for p in paths if os.path.exists(p)]
    if left:
        failures.append(f"cgroups left behind: {left}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
