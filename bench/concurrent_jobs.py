#!/usr/bin/python3
"""Two jobs at once against each alone (issue 51): one coordinator and four
stage servers on loopback, each pinned with `taskset` to its share of the
cores (as bench/throughput.py pins them). Job A runs alone, then job B
alone, then both at once on the same fleet (two stages each, on disjoint
servers). Reports each job's wall time (its record's start to end) alone
and together, and their ratio: 1.0 when the two jobs do not slow each
other, which needs a core per server at least (four here); on fewer cores
the servers of both jobs share them and the ratio says by how much.
With --cpu-quota C each server runs in a cgroup of its own held to C cores
of CPU time, alone and together alike: four servers with a fixed share
each, the issue's setting scaled down to a machine with fewer than four
cores (4 x 0.4 of a core on two, the rest left to the coordinator).
"""

import argparse
import calendar
import json
import os
import tempfile
import time

from bench_common import BenchError, main_guard, run
from cpu_quota import CpuQuotas
from throughput import Fleet


def status(petra, fleet, job_id):
    return json.loads(run([petra, "status", "--coordinator", fleet.address,
                           "--json", job_id], 60))


def submit(petra, fleet, flags):
    out = run([petra, "submit", "--coordinator", fleet.address] + flags, 60)
    return out.split()[0]


def interval(job):
    """The job's start and end, in seconds, from its record."""
    def parse(stamp):
        # RFC 3339 in UTC, with a fraction of a second.
        whole, _, frac = stamp.rstrip("Z").partition(".")
        t = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
        return t + (float("0." + frac) if frac else 0.0)
    return parse(job["start_time"]), parse(job["end_time"])


def seconds(job):
    start, end = interval(job)
    return end - start


def wait_all(petra, fleet, ids, timeout):
    deadline = time.time() + timeout
    while True:
        # `petra status` loads no libtorch: a look costs milliseconds.
        jobs = [status(petra, fleet, i) for i in ids]
        if all(j["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED",
                              "JOB_STATE_CANCELLED") for j in jobs):
            for j in jobs:
                if j["state"] != "JOB_STATE_SUCCEEDED":
                    raise BenchError(f"{j['id']} ended {j['state']}: "
                                     f"{j.get('error', '')}")
            return jobs
        if time.time() > deadline:
            raise BenchError(f"the jobs did not end within {timeout} s")
        time.sleep(0.5)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", default="build/bin")
    p.add_argument("--cores", type=int, default=os.cpu_count(),
                   help="cores the four servers share (default: all)")
    p.add_argument("--cpu-quota", type=float, metavar="CORES",
                   help="hold each server to this much CPU time (a cgroup "
                   "each; root): four servers with a fixed share each on a "
                   "machine with fewer than four cores")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-limit", type=int, default=4096)
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long (CI): one epoch of 256 samples")
    p.add_argument("--timeout", type=int, default=1800)
    a = p.parse_args(argv)
    if a.cores < 1 or a.epochs < 1 or a.train_limit < 1:
        p.error("--cores, --epochs and --train-limit must be positive")
    if a.cpu_quota is not None and not 0 < a.cpu_quota <= a.cores / 4:
        p.error(f"--cpu-quota must be above 0 and at most --cores / 4 "
                f"({a.cores / 4:g}): four servers share {a.cores} core(s)")
    if a.smoke:
        a.epochs, a.train_limit = 1, 256
    petra = os.path.join(a.bin_dir, "petra")
    job = ["--arch", "revnet18", "--width", "0.125", "--dataset", "synthetic",
           "--stages", "2", "--epochs", str(a.epochs), "--train-limit",
           str(a.train_limit), "--test-limit", "256"]
    jobs = {"A": job + ["--seed", "1"], "B": job + ["--seed", "2"]}
    quotas = None
    if a.cpu_quota is not None:
        quotas = CpuQuotas(a.cpu_quota, 4, "petra-concurrent")
    throttled = []
    # The cgroups go once the servers in them have stopped.
    try:
        with tempfile.TemporaryDirectory(prefix="petra-concurrent-") as work:
            fleet = Fleet(a.bin_dir, 4, a.cores, work,
                          prefix=quotas.prefix if quotas else ())
            try:
                alone = {}
                for name, flags in jobs.items():
                    (done,) = wait_all(petra, fleet,
                                       [submit(petra, fleet, flags)],
                                       a.timeout)
                    alone[name] = done
                ids = [submit(petra, fleet, flags) for flags in jobs.values()]
                together = dict(zip(jobs,
                                    wait_all(petra, fleet, ids, a.timeout)))
                if quotas:
                    throttled = [quotas.throttled(i) for i in range(4)]
            finally:
                fleet.stop()
    finally:
        if quotas:
            quotas.close()
    servers = [set(s["address"] for s in together[n].get("stages", []))
               for n in jobs]
    if servers[0] & servers[1]:
        raise BenchError(f"the jobs shared servers: {servers}")

    def cores(job):
        """The cores the job's servers were pinned to."""
        out = set()
        for s in job.get("stages", []):
            if s["address"] in fleet.addresses:
                out.update(fleet.cores[fleet.addresses.index(s["address"])])
        return ",".join(str(c) for c in sorted(out)) or "?"
    (a_start, a_end), (b_start, b_end) = (interval(together[n]) for n in jobs)
    overlap = a_start < b_end and b_start < a_end
    held = (f", each held to {a.cpu_quota:g} of a core (a cgroup CPU quota)"
            if quotas else "")
    print(f"RevNet18 width 0.125, synthetic 32x32, 2 stages, {a.epochs} "
          f"epoch(s) of {a.train_limit} samples; four stage servers on "
          f"{a.cores} core(s) (taskset, as bench/throughput.py){held}\n")
    print("| job | alone (s) | its cores | with the other (s) | its cores "
          "| ratio |")
    print("|---|---:|---|---:|---|---:|")
    for name in jobs:
        s_alone, s_with = seconds(alone[name]), seconds(together[name])
        print(f"| {name} | {s_alone:.1f} | {cores(alone[name])} | "
              f"{s_with:.1f} | {cores(together[name])} | "
              f"{s_with / s_alone:.2f}x |")
    print(f"\nThe two ran on disjoint servers ({len(servers[0])} and "
          f"{len(servers[1])}) and {'overlapped' if overlap else 'did not overlap'}"
          " in time; the target (issue 51) is under 1.3x with four cores' "
          "worth of servers.")
    if quotas:
        print(f"\nEach server had {a.cpu_quota:g} of a core, alone and "
              f"together alike ({4 * a.cpu_quota:g} of the {a.cores} for the "
              "four, the rest for the coordinator and the clients): four "
              "servers with a share each, as on a machine with a core per "
              "server that much slower. Periods of 100 ms in which a "
              "server reached its quota: "
              + ", ".join(f"{fleet.addresses[i]} {n}"
                          for i, n in enumerate(throttled)) + ".")
    elif a.cores < 4:
        print(f"\nOn {a.cores} core(s) the four servers share them, two to "
              "a core: the ratio is the two jobs' contention for these "
              "cores and the coordinator, not what four cores' worth of "
              "servers give; that needs a machine with four.")
    return 0


if __name__ == "__main__":
    main_guard("concurrent_jobs", main)
