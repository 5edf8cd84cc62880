"""A CPU-time quota per process, through a cgroup of its own (v2's cpu.max,
or v1's cpu controller), so that a benchmark can give each of several
servers a fixed share of a core on a machine with fewer cores than servers:
a server held to 0.4 of a core runs as on a machine of its own that much
slower, whatever the others do, which taskset alone cannot give when two
servers share a core. Needs root (or a delegated cgroup).
"""

import os
import time

from bench_common import BenchError

_V2_ROOT = "/sys/fs/cgroup"
_V1_CPU = "/sys/fs/cgroup/cpu"
_PERIOD_US = 100000


def _write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise BenchError(f"cannot write {path}: {e.strerror} (the CPU quota "
                         "needs root and a writable cgroup cpu controller)")


class CpuQuotas:
    """One cgroup per process slot, each limited to `cores` of CPU time.
    `prefix(i)` is the command that puts a process into slot i and runs the
    rest of its argv; `throttled(i)` how many 100 ms periods the slot was
    held back; close() removes the cgroups (their processes must have
    ended)."""

    def __init__(self, cores, count, name):
        if not 0 < cores:
            raise BenchError(f"a CPU quota must be positive, not {cores}")
        if _has_v2_cpu():
            version, parent = 2, _V2_ROOT
        elif os.path.exists(os.path.join(_V1_CPU, "cpu.cfs_quota_us")):
            version, parent = 1, _V1_CPU
        else:
            raise BenchError("no cgroup cpu controller here (neither "
                             f"{_V2_ROOT}/cgroup.controllers listing cpu nor "
                             f"{_V1_CPU}): --cpu-quota cannot hold servers "
                             "to a share of a core")
        self.paths = []
        quota = int(cores * _PERIOD_US)
        try:
            for i in range(count):
                path = os.path.join(parent, f"{name}-{os.getpid()}-{i}")
                try:
                    os.mkdir(path)
                except OSError as e:
                    raise BenchError(f"cannot create the cgroup {path}: "
                                     f"{e.strerror} (--cpu-quota needs root)")
                self.paths.append(path)
                if version == 2:
                    _write(os.path.join(path, "cpu.max"),
                           f"{quota} {_PERIOD_US}")
                else:
                    _write(os.path.join(path, "cpu.cfs_period_us"),
                           str(_PERIOD_US))
                    _write(os.path.join(path, "cpu.cfs_quota_us"), str(quota))
        except BaseException:
            self.close()
            raise

    def prefix(self, i):
        # sh writes its own pid into the slot, then becomes the process (its
        # errors are named "cpu_quota").
        return ["sh", "-c",
                'echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
                "cpu_quota", self.paths[i]]

    def throttled(self, i):
        """Periods slot i was held at its quota (cpu.stat's nr_throttled)."""
        with open(os.path.join(self.paths[i], "cpu.stat")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "nr_throttled":
                    return int(value)
        return 0

    def close(self):
        for path in self.paths:
            # A process that just exited may take a moment to leave.
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        self.paths = []


def _has_v2_cpu():
    try:
        with open(os.path.join(_V2_ROOT, "cgroup.controllers")) as f:
            if "cpu" not in f.read().split():
                return False
        with open(os.path.join(_V2_ROOT, "cgroup.subtree_control")) as f:
            return "cpu" in f.read().split()
    except OSError:
        return False


if __name__ == "__main__":
    # `python3 bench/cpu_quota.py`: exit 0 where quotas can be set here
    # (scripts/bench.sh asks before it uses them), else 1 with the reason.
    import sys
    try:
        CpuQuotas(0.5, 1, "petra-quota-probe").close()
    except BenchError as e:
        print(f"cpu_quota: {e}", file=sys.stderr)
        sys.exit(1)
