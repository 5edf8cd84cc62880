#!/usr/bin/python3
"""A randomized fault campaign against a fleet (scripts/chaos.sh).

Each run starts a fleet of separate processes on loopback: a coordinator,
two stage servers and an idle spare, each stage server behind a
fault-injecting proxy (tests/netns/faultproxy.py), every state directory on
a small tmpfs of its own where mounting is allowed. It submits a short job,
follows it with `petra watch`, and a scheduler injects 1 to 3 faults drawn
from the run's seed at random moments: SIGKILL, SIGSTOP for longer than the
coordinator's 3 s status deadline then SIGCONT, or SIGTERM, of any process
(the coordinator, a stage server, the watching client; killed or stopped
servers are started again on the same port and state directory), a link
that loses traffic or is cut for a while, 200 ms of added latency, a full
state-directory disk for a while, and the newest checkpoint corrupted.

Every run must end within --bound seconds (else it counts as a hang) with
the job SUCCEEDED and its test accuracy within 1 point of the same job
uninterrupted, or FAILED with a reason that names one of its faults; and no
checkpoint it leaves may verify (its SHA-256) yet differ from the
uninterrupted run's of the same epoch. With --replicas 2 the job is two
replicas of a one-stage pipeline on the two stage servers (the spare
stays), so every stage fault hits a replica and its all-reduce partner
sees it. With --jobs 2 two such jobs run at once on disjoint servers (four
stage servers and a spare), the faults landing on either, and each job is
held to the rules. With --stranger a stranger sends micro-batches without
the jobs' data keys (none, and a made-up one) to every stage server's
Forward and Backward throughout each run: every such stream must end
UNAUTHENTICATED (or find its server away, killed or stopped by a fault),
and the jobs are held to the same rules. The campaign prints every run and a
summary table (runs, faults by kind, outcomes, worst recovery), and exits 1
when any run broke a rule.
"""

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from chaos_fleet import CampaignError, Fleet

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KINDS = ["kill", "stop", "term", "loss", "partition", "latency", "disk_full",
         "corrupt_checkpoint"]
TARGETS = ["coordinator", "stage-0", "stage-1", "watch"]
JOB = ["--arch", "revnet18", "--width", "0.125", "--dataset", "synthetic",
       "--stages", "2", "--epochs", "4", "--train-limit", "1024",
       "--test-limit", "256", "--checkpoint-every", "1", "--seed", "5",
       "--lr", "0.3",  # learns the set (about 94%): a fault that hurt shows
       # Whole steps of 64 a micro-batch: the faults land as often, and the
       # recipe's micro-batches of 16 cost CI 20 s of wall time for nothing.
       "--micro-batch", "64"]


def job_state(fleet, job):
    r = fleet.petra(["status", "--json", job], timeout=30)
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def checkpoints(state_dir, job):
    """{(epoch, stage): sha256 of the file} of the checkpoints that verify."""
    out = {}
    root = os.path.join(state_dir, "jobs", job, "checkpoints")
    if not os.path.isdir(root):
        return out
    for folder in os.listdir(root):
        m = re.match(r"epoch-(\d+)$", folder)
        if not m:
            continue
        for name in os.listdir(os.path.join(root, folder)):
            s = re.match(r"stage-(\d+)\.pt$", name)
            if not s:
                continue
            path = os.path.join(root, folder, name)
            try:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                with open(path + ".sha256") as f:
                    recorded = f.read().split()[0]
            except (OSError, IndexError):
                continue
            if digest == recorded:
                out[(int(m.group(1)), int(s.group(1)))] = digest
    return out


def inject(fleet, kind, target, duration, events):
    """Starts one fault; returns what undoes it (or None)."""
    now = time.time()
    if kind in ("loss", "partition", "latency"):
        stage = target if target.startswith("stage") else "stage-1"
        faults = {"loss": {"loss": 0.2, "loss_stall_ms": 300},
                  "partition": {"partition": True},
                  "latency": {"delay_ms": 200}}[kind]
        fleet.set_faults(stage, **faults)
        events.append((now, kind, stage))
        return lambda: fleet.set_faults(stage)
    if kind == "disk_full":
        name = "coordinator" if target in ("coordinator", "watch") else target
        path = os.path.join(fleet.state_dir(name), "chaos-filler")
        if fleet.state_dir(name) not in fleet.mounts:
            events.append((now, "disk_full (no tmpfs: skipped)", name))
            return None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            block = b"\0" * (1 << 20)
            while True:
                os.write(fd, block)
        except OSError:
            pass  # full
        finally:
            os.close(fd)
        events.append((now, kind, name))
        return lambda: os.path.exists(path) and os.remove(path)
    if kind == "corrupt_checkpoint":
        root = os.path.join(fleet.state_dir("coordinator"), "jobs")
        newest = None
        for dirpath, _, files in os.walk(root):
            for name in files:
                if re.match(r"stage-\d+\.pt$", name):
                    path = os.path.join(dirpath, name)
                    if newest is None or os.path.getmtime(path) > \
                            os.path.getmtime(newest):
                        newest = path
        if newest is None:
            events.append((now, "corrupt_checkpoint (none yet)", "-"))
            return None
        with open(newest, "r+b") as f:
            size = f.seek(0, 2)
            f.seek(size // 2)
            f.write(b"\x5a\xa5\x5a\xa5")
        events.append((now, kind, os.path.relpath(newest, fleet.root)))
        return None
    p = fleet.procs.get(target)
    if p is None or p.poll() is not None:
        events.append((now, f"{kind} (not running)", target))
        return None
    if kind == "stop":
        p.send_signal(signal.SIGSTOP)
        events.append((now, kind, target))
        return lambda: p.send_signal(signal.SIGCONT)
    p.send_signal(signal.SIGKILL if kind == "kill" else signal.SIGTERM)
    events.append((now, kind, target))
    # Started again once it is gone (a server on its port and state).
    return ("restart", target)


def names_a_fault(reason, faults, fleet):
    """Whether a failed job's reason names one of the run's faults: the
    full disk, the damaged checkpoint, or the address of the stage server
    that was signalled or cut off (as the coordinator knows it: its
    proxy's), or the coordinator."""
    for fault in faults:
        kind, target = fault.split("@")
        if kind == "disk_full" and "No space left on device" in reason:
            return True
        if kind == "corrupt_checkpoint" and re.search(
                r"(?i)sha-?256|checksum|corrupt|damaged|verif", reason):
            return True
        if target in fleet.proxy_ports and kind not in (
                "disk_full", "corrupt_checkpoint") and \
                f"127.0.0.1:{fleet.proxy_ports[target]}" in reason:
            return True
        if target == "coordinator" and kind in ("kill", "stop", "term") and \
                "coordinator" in reason:
            return True
    return False


def leaked_rings(pids):
    """Shared-memory rings (docs/DATA_PLANE.md) still named by processes of
    the run once all of them are gone: each is a leak. Removed once
    counted, so one run's leak does not count against the next."""
    leaked = 0
    for name in os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []:
        parts = name.split("-")
        if len(parts) == 4 and parts[0] == "petra" and \
                parts[2].isdigit() and int(parts[2]) in pids:
            leaked += 1
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
    return leaked


def judge(end, job, faults, fleet, baseline):
    """One job's end against the rules: SUCCEEDED within a point of the
    uninterrupted run's accuracy, or FAILED naming one of the faults; and no
    checkpoint that verifies yet differs from the uninterrupted run's."""
    recoveries = end.get("recoveries", [])
    v = {"job": job, "state": end["state"], "recoveries": len(recoveries),
         "worst_recovery_seconds": max(
             [r.get("seconds", 0) for r in recoveries] or [0])}
    accuracy = end.get("progress", {}).get("test_accuracy", 0)
    v["accuracy"] = accuracy
    if end["state"] == "JOB_STATE_SUCCEEDED":
        v["outcome"] = "succeeded"
        v["ok"] = abs(accuracy - baseline["accuracy"]) <= 0.01
        if not v["ok"]:
            v["why"] = (f"accuracy {accuracy:.4f} against "
                        f"{baseline['accuracy']:.4f} uninterrupted")
    else:
        reason = end.get("error", {}).get("message", "")
        v["outcome"] = "failed"
        v["reason"] = reason
        v["ok"] = names_a_fault(reason, faults, fleet)
        if not v["ok"]:
            v["why"] = ("failed with a reason that names none of "
                        f"its faults: {reason!r}")
    for key, digest in checkpoints(fleet.state_dir("coordinator"),
                                   job).items():
        if key in baseline["checkpoints"] and \
                baseline["checkpoints"][key] != digest:
            v["ok"] = False
            v["why"] = (f"epoch {key[0]} stage {key[1]}'s checkpoint "
                        "verifies but differs from the uninterrupted run's")
    return v


# A ForwardMessage of job-1, its last part, by hand (field 1 job_id, field 8
# last_part): the stranger needs no generated code.
STRANGER_MESSAGE = b"\x0a\x05job-1" + b"\x40\x01"
STRANGER_KEYS = [None, "0" * 64]


def stranger(fleet, stop, record):
    """Sends micro-batches without a data key to every stage server until
    `stop`; counts how each stream ended in `record`."""
    import grpc  # Debian's python3-grpcio; only --stranger needs it
    n = 0
    while not stop.is_set():
        for name in fleet.servers:
            port = fleet.ports.get(name)
            if port is None:
                continue
            for method in ("Forward", "Backward"):
                key = STRANGER_KEYS[n % len(STRANGER_KEYS)]
                n += 1
                channel = grpc.insecure_channel(f"127.0.0.1:{port}")
                call = channel.stream_stream(
                    f"/petra.v1.StageService/{method}")
                try:
                    list(call(iter([STRANGER_MESSAGE]), timeout=5,
                              metadata=[("petra-data-key", key)] if key else None))
                    record["answered"] += 1
                    record.setdefault("why", f"{name} {method}: a stream "
                                      "without the data key was answered")
                except grpc.RpcError as e:
                    if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                        record["refused"] += 1
                    elif e.code() in (grpc.StatusCode.UNAVAILABLE,
                                      grpc.StatusCode.DEADLINE_EXCEEDED):
                        record["away"] += 1
                    else:
                        record["answered"] += 1
                        record.setdefault("why", f"{name} {method}: "
                                          f"{e.code().name} {e.details()}")
                finally:
                    channel.close()
        stop.wait(0.2)


def one_run(args, run, seed, baseline, use_tmpfs):
    rng = random.Random(seed)
    root = tempfile.mkdtemp(prefix=f"petra-chaos-{run}-")
    fleet = Fleet(args.bin_dir, root, use_tmpfs, servers=2 * args.jobs + 1)
    events, faults = [], []
    result = {"run": run, "seed": seed, "faults": faults}
    try:
        fleet.start_servers()
        jobs = []
        for _ in range(args.jobs):
            r = fleet.petra(["submit"] + JOB)
            if r.returncode != 0:
                raise CampaignError("submit failed: " + r.stderr)
            jobs.append(r.stdout.split()[0])
        fleet.commands["watch"] = [
            os.path.join(args.bin_dir, "petra"), "watch", "--coordinator",
            f"127.0.0.1:{fleet.ports['coordinator']}", jobs[0]]
        fleet.start("watch")
        if args.stranger:
            result["stranger"] = {"refused": 0, "away": 0, "answered": 0}
            stop_stranger = threading.Event()
            stranger_thread = threading.Thread(
                target=stranger, args=(fleet, stop_stranger,
                                       result["stranger"]), daemon=True)
            stranger_thread.start()
        start = time.time()
        plan = []
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(KINDS)
            # The jobs' servers (not the spare), the coordinator, the client.
            target = rng.choice(TARGETS + fleet.servers[2:-1])
            if kind in ("loss", "partition", "latency"):
                target = rng.choice(fleet.servers[:-1])
            # Named by what they hit: the coordinator's disk and checkpoints.
            if kind == "corrupt_checkpoint" or (kind == "disk_full" and
                                                target == "watch"):
                target = "coordinator"
            plan.append((rng.uniform(1, args.fault_window), kind, target,
                         rng.uniform(4, 10)))
        plan.sort()
        for at, kind, target, duration in plan:
            faults.append(f"{kind}@{target}")
        pending = []  # (time, action)
        todo = list(plan)
        ends = None
        last_look = -2.0
        while time.time() - start < args.bound:
            now = time.time() - start
            while todo and todo[0][0] <= now:
                at, kind, target, duration = todo.pop(0)
                undo = inject(fleet, kind, target, duration, events)
                if isinstance(undo, tuple):
                    pending.append((now + 2, lambda t=undo[1]: fleet.restart(t)))
                elif undo is not None:
                    pending.append((now + duration, undo))
            for item in [p for p in pending if p[0] <= now]:
                pending.remove(item)
                if item[1]() is False:  # not yet: look again in a second
                    pending.append((now + 1, item[1]))
            # Each look is a `petra` process (most of a CPU-second): every
            # 2 s once the faults are done, not every tick, or the looking
            # takes a core from the job under test.
            if not todo and not pending and now - last_look >= 2:
                last_look = now
                states = [job_state(fleet, job) for job in jobs]
                if all(st and st.get("state") in (
                        "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED",
                        "JOB_STATE_CANCELLED") for st in states):
                    ends = states
                    break
            time.sleep(0.5)
        result["seconds"] = round(time.time() - start, 1)
        if args.stranger:
            stop_stranger.set()
            stranger_thread.join()
        if ends is None:
            result["outcome"] = "hang"
            result["ok"] = False
            return result
        verdicts = [judge(end, job, faults, fleet, baseline)
                    for job, end in zip(jobs, ends)]
        result["jobs"] = verdicts
        result["state"] = ",".join(v["state"] for v in verdicts)
        result["recoveries"] = sum(v["recoveries"] for v in verdicts)
        result["worst_recovery_seconds"] = max(
            v["worst_recovery_seconds"] for v in verdicts)
        result["accuracy"] = min(v["accuracy"] for v in verdicts)
        result["outcome"] = ("succeeded" if all(
            v["outcome"] == "succeeded" for v in verdicts) else "failed")
        reasons = [v["reason"] for v in verdicts if v.get("reason")]
        if reasons:
            result["reason"] = "; ".join(reasons)
        result["ok"] = all(v["ok"] for v in verdicts)
        whys = [f"{v['job']}: {v['why']}" if len(jobs) > 1 else v["why"]
                for v in verdicts if not v["ok"]]
        if args.stranger:
            s = result["stranger"]
            if s["answered"] or not s["refused"]:
                result["ok"] = False
                whys.append(s.get("why", "the stranger was never refused"))
        if whys:
            result["why"] = "; ".join(whys)
        return result
    finally:
        result["events"] = [(round(t - (events[0][0] if events else t), 1),
                             k, w) for t, k, w in events]
        fleet.close()
        leaked = leaked_rings(set(getattr(fleet, "pids", [])))
        if leaked:
            result["ok"] = False
            result["why"] = (f"{leaked} shared-memory ring(s) outlived the "
                             "run's processes")
        if args.keep:
            result["dir"] = root
        else:
            shutil.rmtree(root, ignore_errors=True)


def uninterrupted(args, use_tmpfs):
    """The job without faults: its accuracy and checkpoints."""
    root = tempfile.mkdtemp(prefix="petra-chaos-baseline-")
    fleet = Fleet(args.bin_dir, root, use_tmpfs)
    try:
        fleet.start_servers()
        r = fleet.petra(["submit", "--watch"] + JOB, timeout=args.bound)
        if r.returncode != 0:
            raise CampaignError("the uninterrupted job failed: " + r.stdout +
                                r.stderr)
        job = r.stdout.split()[0]
        end = job_state(fleet, job)
        return {"accuracy": end["progress"]["test_accuracy"],
                "seconds": end["progress"].get("elapsed_seconds", 0),
                "checkpoints": checkpoints(fleet.state_dir("coordinator"),
                                           job)}
    finally:
        fleet.close()
        shutil.rmtree(root, ignore_errors=True)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bound", type=float, default=240,
                   help="seconds a run may take before it counts as a hang "
                        "(default 240)")
    p.add_argument("--fault-window", type=float, default=None,
                   help="faults start within this many seconds of the "
                        "submission (default: 0.8 x the uninterrupted job's "
                        "time)")
    p.add_argument("--transport", default="auto",
                   choices=["auto", "grpc", "grpc_bulk", "shm"],
                   help="the job's data channel between stages (default "
                        "auto: shared memory on this one host)")
    p.add_argument("--replicas", type=int, default=1, choices=[1, 2],
                   help="2: the job runs as 2 replicas of one stage "
                        "(--replicas 2 --stages 1) on the two stage servers")
    p.add_argument("--jobs", type=int, default=1, choices=[1, 2],
                   help="2: two jobs at once on disjoint servers (four "
                        "stage servers and a spare), faults in both")
    p.add_argument("--stranger", action="store_true",
                   help="a stranger sends micro-batches without the jobs' "
                        "data keys to every stage server throughout each "
                        "run; each must be refused")
    p.add_argument("--json", help="write every run's record here")
    p.add_argument("--keep", action="store_true",
                   help="keep each run's directory (logs, state)")
    a = p.parse_args(argv)
    JOB.extend(["--transport", a.transport])
    if a.replicas > 1:
        JOB[JOB.index("--stages") + 1] = "1"
        JOB.extend(["--replicas", str(a.replicas)])
    if a.runs < 1:
        p.error("--runs must be at least 1")
    if not a.bound > 0 or (a.fault_window is not None and
                           not a.fault_window > 0):
        p.error("--bound and --fault-window must be positive")
    for program in ("petra", "petra-coordinator", "petra-stage-server"):
        if not os.access(os.path.join(a.bin_dir, program), os.X_OK):
            p.error(f"--bin-dir: no {program} in {a.bin_dir}")
    a.bin_dir = os.path.abspath(a.bin_dir)
    probe = tempfile.mkdtemp(prefix="petra-chaos-tmpfs-")
    use_tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m",
                                "tmpfs", probe],
                               capture_output=True).returncode == 0
    if use_tmpfs:
        subprocess.run(["umount", probe], capture_output=True)
    os.rmdir(probe)
    print(f"chaos: seed {a.seed}, {a.runs} runs, bound {a.bound:.0f} s, "
          f"{a.jobs} job(s) at once, {a.replicas} replica(s)"
          f"{', a stranger at every stage' if a.stranger else ''}; "
          f"state on tmpfs: {'yes' if use_tmpfs else 'no (disk_full faults are skipped)'}",
          file=sys.stderr, flush=True)
    baseline = uninterrupted(a, use_tmpfs)
    if a.fault_window is None:
        a.fault_window = max(2.0, 0.8 * baseline["seconds"])
    print(f"chaos: uninterrupted: test accuracy {baseline['accuracy']:.4f} "
          f"in {baseline['seconds']:.0f} s, "
          f"{len(baseline['checkpoints'])} checkpoint files; faults within "
          f"{a.fault_window:.0f} s of the submission",
          file=sys.stderr, flush=True)
    seeds = random.Random(a.seed)
    results = []
    for run in range(1, a.runs + 1):
        r = one_run(a, run, seeds.randrange(1 << 30), baseline, use_tmpfs)
        results.append(r)
        print(f"chaos: run {run}: {', '.join(r['faults'])} -> "
              f"{r.get('outcome')} in {r.get('seconds')} s"
              + (f" (stranger: {r['stranger']['refused']} refused, "
                 f"{r['stranger']['away']} found its server away)"
                 if "stranger" in r else "") +
              f"{'' if r.get('ok') else ' BROKE A RULE: ' + r.get('why', r.get('outcome', ''))}",
              file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"baseline": {"accuracy": baseline["accuracy"]},
                       "runs": results}, f, indent=1, default=str)
    by_kind = {}
    for r in results:
        for f in r["faults"]:
            kind = f.split("@")[0]
            by_kind[kind] = by_kind.get(kind, 0) + 1
    outcomes = {}
    for r in results:
        outcomes[r.get("outcome")] = outcomes.get(r.get("outcome"), 0) + 1
    print(f"seed {a.seed}: {len(results)} runs of a job that takes "
          f"{baseline['seconds']:.0f} s uninterrupted, test accuracy "
          f"{100 * baseline['accuracy']:.2f}%; faults within "
          f"{a.fault_window:.0f} s of its submission\n")
    print("| faults injected, by kind | runs |")
    print("|---|---:|")
    for kind in KINDS:
        print(f"| {kind} | {by_kind.get(kind, 0)} |")
    print()
    print("| outcome | runs |")
    print("|---|---:|")
    for outcome in ("succeeded", "failed", "hang"):
        print(f"| {outcome} | {outcomes.get(outcome, 0)} |")
    worst = max([r.get("worst_recovery_seconds", 0) for r in results] or [0])
    longest = max([r.get("seconds", 0) for r in results] or [0])
    broken = [r for r in results if not r.get("ok")]
    print()
    print(f"worst recovery: {worst:.1f} s; longest run: {longest:.0f} s "
          f"(bound {a.bound:.0f} s); runs that broke a rule: {len(broken)}")
    for r in results:
        if r.get("outcome") == "failed" or not r.get("ok"):
            print(f"- run {r['run']} ({', '.join(r['faults'])}): "
                  f"{r.get('outcome')}: "
                  f"{r.get('why') or r.get('reason', '')}")
    return 1 if broken else 0


if __name__ == "__main__":
    # A SIGTERM (ctest's timeout, a user's kill) unwinds like an error, so
    # each run's finally stops its fleet and unmounts its tmpfs mounts.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(main(sys.argv[1:]))
    except CampaignError as e:
        print(f"chaos: {e}", file=sys.stderr)
        sys.exit(1)
