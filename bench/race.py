#!/usr/bin/python3
"""PETRA raced against the pipelines users run (issue 68): backprop on one
stage with every core, GPipe, 1F1B, 1F1B with --recompute and PETRA, on
RevNet18 (the main job's Fashion-MNIST) and the small RevLM, at J = 2
stages (one thread each, a core each on 2 cores) and J = 4 (time-shared:
four threads on the same cores, so each stage's rate is a share).

Every row trains the same samples a step, in the same micro-batches
(RevNet18 16 x 4, RevLM 8 x 8: the recipes' defaults for PETRA and for the
synchronous pipelines), for the same epochs, evaluating after each; the
target is backprop's final metric (test accuracy, or test loss for the
language model), and "time to target" the elapsed seconds of the first
evaluation that reached it: every --eval-every-steps optimizer steps
(`petra train --eval-every-steps`, default 20: four times an epoch) and at
each epoch's end. Each row's rate, bubble fraction (idle over training
time, as the stages count it) and most tensor memory any one stage held
inside training passes (the allocator's count,
`host_tensors_train_peak`: the evaluations' own peak left out) come from
its `petra train --report`.

Beside each measured rate, the simulator's predictions for it. From a
profile: `petra profile` of the same partition, just before the row's run,
measures each stage's forward and backward on this machine (with the
graph kept too, and its bytes), and `petra simulate --profile` runs the
row's schedule over the same micro-batches with free links (one process),
`--store-activations` for the rows that keep their graphs. From the run's
stage times: the same simulation with each stage's forward and backward
as the run itself measured them (its report's seconds over counts): the
schedule model alone, apart from how the machine's speed drifted between
the profile's second and the run's minutes (the profiled slowest stage of
one partition, row to row, shows that drift). "Activations" is the most a stage held of everything but
its weights, gradients and optimizer state (the allocator's peak less
those), beside the simulator's kept activations for the same stage.

Then the simulator alone at J = 8, 16 and 64 on GPUs (`--at-scale`): a
64-block language model estimated from its FLOPs at a GPU's rate, one GPU a
stage, 8 a host, what each schedule's rate would be and what binds it.

With --plots DIR, each race's curves (the metric against wall-clock time,
one line per method, the target dashed) are written there as PNGs
(petra.plot, python3-matplotlib).
"""

import argparse
import importlib.util
import json
import os
import sys
import tempfile

from bench_common import (BenchError, add_petra_arg, check_petra, main_guard,
                          run, train_report)

# (name, flags, the schedule `petra simulate` runs for it, its flags).
STORED = ["--store-activations"]
METHODS = [
    ("backprop, 1 stage, all cores",
     ["--mode", "backprop", "--stages", "1"], "backprop", []),
    ("GPipe", ["--mode", "pipeline", "--schedule", "gpipe"], "gpipe", STORED),
    ("1F1B", ["--mode", "pipeline", "--schedule", "1f1b"], "1f1b", STORED),
    ("1F1B, recompute",
     ["--mode", "pipeline", "--schedule", "1f1b", "--recompute"], "1f1b", []),
    ("PETRA", ["--mode", "petra"], "petra", []),
]
# The simulator at scale: a 64-block language model (GPT-2-large-like
# width) from its FLOPs, on GPUs of a sustained bf16 rate, 8 a host with
# NVLink-class links inside and InfiniBand-class links across.
AT_SCALE_MODEL = ["--arch", "revlm", "--embed-dim", "1024", "--depth", "64",
                  "--heads", "16", "--seq-len", "1024", "--micro-batch", "8"]
AT_SCALE_FLEET = ["--device-flops-per-second", "4e14", "--devices-per-host",
                  "8", "--link-bandwidth", "4.5e11", "--cross-host-bandwidth",
                  "5e10", "--link-latency", "5e-6"]
AT_SCALE_STAGES = [8, 16, 64]
# (flags, micro-batch, k, whether the metric is a loss).
NETWORKS = {
    "revnet18": (["--arch", "revnet18", "--width", "0.25", "--dataset",
                  "fashion_mnist"], 16, 4, False),
    "revlm": (["--arch", "revlm", "--embed-dim", "64", "--depth", "4",
               "--heads", "4", "--seq-len", "64"], 8, 8, True),
}
SMOKE = {
    "revnet18": (["--arch", "revnet18", "--width", "0.125", "--dataset",
                  "synthetic"], 16, 4, False),
    "revlm": (["--arch", "revlm", "--embed-dim", "16", "--depth", "2",
               "--heads", "2", "--seq-len", "16"], 8, 8, True),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--networks", default="revnet18,revlm",
                   help="comma-separated: revnet18, revlm (default both)")
    p.add_argument("--stages", default="2,4",
                   help="comma-separated stage counts J (default 2,4)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-limit", type=int, default=5120,
                   help="training samples (sequences) an epoch (default "
                        "5120: both networks at J = 2 and 4 in half an hour "
                        "on 2 cores)")
    p.add_argument("--test-limit", type=int, default=1000)
    p.add_argument("--eval-every-steps", type=int, default=20,
                   help="evaluate every N optimizer steps inside epochs too "
                        "(default 20; 0: at epochs' ends only)")
    p.add_argument("--seed", default="1")
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long: tiny models, one epoch of 256 "
                        "samples, J = 2, profiles of 3 repeats")
    p.add_argument("--timeout", type=int, default=7200)
    p.add_argument("--json", help="write every row to this file")
    p.add_argument("--plots", help="write each race's curves as PNGs into "
                                   "this folder")
    p.add_argument("--at-scale", action="store_true",
                   help="also the simulator's rows at J = 8, 16, 64 on GPUs")
    a = p.parse_args(argv)
    check_petra(p, a.petra)
    a.networks = [n for n in a.networks.split(",") if n]
    for n in a.networks:
        if n not in NETWORKS:
            p.error(f"--networks: unknown network {n!r} (revnet18, revlm)")
    try:
        a.stages = [int(j) for j in a.stages.split(",") if j]
    except ValueError:
        p.error(f"--stages: not a list of numbers: {a.stages!r}")
    if not a.stages or any(j < 2 or j > 10 for j in a.stages):
        p.error("--stages: each J must be in [2, 10]")
    if a.epochs < 1 or a.train_limit < 1 or a.test_limit < 1:
        p.error("--epochs, --train-limit and --test-limit must be >= 1")
    if a.eval_every_steps < 0:
        p.error("--eval-every-steps must be >= 0")
    if a.smoke:
        a.stages, a.epochs, a.train_limit, a.test_limit = [2], 1, 256, 64
        a.eval_every_steps = 2
    # Each row's profile: its slowest stage's times, which the simulator's
    # prediction stands on (a smoke run only needs the numbers to exist).
    a.profile_repeats = 3 if a.smoke else 20
    return a


def metric(epoch, loss):
    return epoch["test_loss"] if loss else epoch["test_accuracy"]


def reached(value, target, loss):
    return value <= target if loss else value >= target


def simulate(petra, profile, schedule, micro_batches, group, extra):
    """The simulator's samples/s for `schedule` over the profiled stages
    (free links: one process), and the most activations it has a stage
    keep."""
    out = run([petra, "simulate", "--profile", profile, "--schedule",
               schedule, "--micro-batches", str(micro_batches), "--group",
               str(group), "--link-bandwidth", "1e15", "--link-latency", "0",
               "--json"] + extra, 600)
    try:
        s = json.loads(out)["schedules"][0]
        return (s["steady_samples_per_second"],
                max(x["input_buffer_bytes"] for x in s["stages"]))
    except (ValueError, KeyError, IndexError) as e:
        raise BenchError(f"petra simulate gave no rate: {e}")


def activations(stage):
    """What a stage held at its most inside training passes of everything
    but its weights, gradients and optimizer state (the allocator's
    count)."""
    m = stage["memory_bytes"]
    return max(0, m["host_tensors_train_peak"] - m["parameters"] -
               m["optimizer_state"])


def profile(petra, flags, stages, threads, micro_batch, repeats, path):
    run([petra, "profile"] + flags +
        ["--stages", str(stages), "--threads", str(threads), "--micro-batch",
         str(micro_batch), "--repeats", str(repeats), "--output", path], 1800)
    with open(path) as f:
        return json.load(f)


def slowest_ms(prof):
    """The profile's slowest stage, forward and backward, in ms."""
    return 1e3 * max(s.get("forward_seconds", 0) + s.get("backward_seconds", 0)
                     for s in prof["stages"])


def run_costs(prof, report, path):
    """`prof` with each stage's times replaced by what the run itself
    measured a micro-batch (its report's forward and backward seconds over
    their counts), written to `path`: the simulator's schedule model fed
    the run's own costs, apart from how the machine's speed drifted
    between the profile and the run."""
    p = json.loads(json.dumps(prof))
    for s, measured in zip(p["stages"], report["stages"]):
        f = measured["forward_seconds"] / max(1, measured["forward_count"])
        b = measured["backward_seconds"] / max(1, measured["backward_count"])
        # Which of them the row's schedule uses, the simulator picks.
        s.update(forward_seconds=f, forward_stored_seconds=f,
                 backward_seconds=b, backward_stored_seconds=b)
    with open(path, "w") as out:
        json.dump(p, out)
    return path


def race(a, name, stages, folder):
    flags, mb, k, loss = (SMOKE if a.smoke else NETWORKS)[name]
    tokens = int(flags[flags.index("--seq-len") + 1]) if loss else 1
    common = flags + ["--micro-batch", str(mb), "--accumulation", str(k),
                      "--epochs", str(a.epochs), "--eval-every", "1",
                      "--eval-every-steps", str(a.eval_every_steps),
                      "--train-limit", str(a.train_limit), "--test-limit",
                      str(a.test_limit), "--seed", a.seed, "--runner",
                      "in-process"]
    cores = os.cpu_count() or 1
    micro_batches = a.train_limit // mb
    rows = []
    for i, (method, extra, schedule, sim_flags) in enumerate(METHODS):
        one = schedule == "backprop"
        threads = cores if one else 1
        job = common + extra + (["--threads-per-stage", str(threads)] +
                                ([] if one else ["--stages", str(stages)]))
        print(f"race: {name}, J = {stages}: {method}", file=sys.stderr)
        # Each row's partition profiled just before its run: this machine's
        # speed drifts from minute to minute (see slowest_ms in the table).
        path = os.path.join(folder, f"profile-{name}-{stages}-{i}.json")
        prof = profile(a.petra, flags, 1 if one else stages, threads, mb,
                       a.profile_repeats, path)
        r = train_report(a.petra, job, a.timeout)
        epochs = r["epochs"]
        # The simulator counts sequences; the report, a model's tokens.
        predicted, kept = simulate(a.petra, path, schedule, micro_batches, k,
                                   sim_flags)
        own, _ = simulate(a.petra, run_costs(prof, r, path + ".run.json"),
                          schedule, micro_batches, k, sim_flags)
        rows.append({
            "method": method, "schedule": schedule, "stages": 1 if one
            else stages, "threads_per_stage": threads,
            "rate": r.get("tokens_per_second") if loss else
            r["samples_per_second"],
            "predicted_rate": predicted * tokens,
            "predicted_from_run": own * tokens,
            "profiled_slowest_ms": slowest_ms(prof),
            "bubble": r.get("bubble_fraction", 0.0),
            "peak_bytes": max(s["memory_bytes"]["host_tensors_train_peak"]
                              for s in r["stages"]),
            "activation_bytes": max(activations(s) for s in r["stages"]),
            "predicted_activation_bytes": kept,
            "metric": metric(epochs[-1], loss),
            "timeline": [(e["elapsed_seconds"], metric(e, loss))
                         for e in epochs],
        })
    target = rows[0]["metric"]
    for row in rows:
        row["time_to_target"] = next(
            (t for t, m in row["timeline"] if reached(m, target, loss)), None)
    return rows, loss


def table(name, stages, rows, loss):
    unit = "tokens/s" if loss else "samples/s"
    what = "test loss" if loss else "test accuracy"
    shared = "one thread each" if stages <= (os.cpu_count() or 1) else \
        "time-shared: more stage threads than cores"
    lines = [f"### {name}, J = {stages} ({shared})", "",
             f"| method | stages | {unit} | simulator's, from a profile | "
             f"simulator's, from the run's stage times | profiled slowest "
             f"stage, ms | bubble | most tensor "
             f"memory on a stage in training, MB | activations, MB | "
             f"simulator's kept, MB "
             f"| {what} | time to backprop's, s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m = f"{r['metric']:.4f}" if loss else f"{100 * r['metric']:.2f}%"
        t = "not reached" if r["time_to_target"] is None else \
            f"{r['time_to_target']:.1f}"
        lines.append(
            f"| {r['method']} | {r['stages']} | {r['rate']:,.0f} | "
            f"{r['predicted_rate']:,.0f} | {r['predicted_from_run']:,.0f} | "
            f"{r['profiled_slowest_ms']:.1f} | {100 * r['bubble']:.1f}% | "
            f"{r['peak_bytes'] / 1e6:.1f} | "
            f"{r['activation_bytes'] / 1e6:.1f} | "
            f"{r['predicted_activation_bytes'] / 1e6:.1f} | {m} | {t} |")
    pipelined = [r["profiled_slowest_ms"] for r in rows if r["stages"] > 1]
    if len(pipelined) > 1:
        lines += ["", f"The same {stages}-stage partition, profiled before "
                  f"each of its {len(pipelined)} runs: slowest stage "
                  f"{min(pipelined):.1f} to {max(pipelined):.1f} ms a "
                  f"micro-batch."]
    return "\n".join(lines)


def load_plot():
    """python/petra/plot.py, without the package (whose models need
    torch)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "python", "petra", "plot.py")
    spec = importlib.util.spec_from_file_location("petra_plot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def curves(folder, name, stages, rows, loss):
    """The race's PNG, in `folder`; its file name."""
    target = rows[0]["metric"]
    lines = {r["method"]: r["timeline"] for r in rows}
    file = f"race-{name}-J{stages}.png"
    load_plot().race_figure(lines, target, os.path.join(folder, file),
                            f"{name}, J = {stages}: the metric against time",
                            loss)
    return file


def at_scale(petra):
    """The simulator's rows at J = 8, 16 and 64 (one GPU a stage): each
    schedule's steady rate, the most a stage keeps, and what binds it."""
    lines = ["### The simulator at scale: J = 8, 16, 64 GPUs", "",
             "Commands, for each J: `petra simulate " +
             " ".join(AT_SCALE_MODEL + AT_SCALE_FLEET) +
             " --stages J --micro-batches 1024 --group 4J --schedule all "
             "--json`, and the same with `--store-activations` for the GPipe "
             "and 1F1B rows (backprop: model-parallel without overlap). "
             "Flushes of 4J micro-batches; "
             "memory: the most a stage keeps (stored graphs or inputs, "
             "weight stashes, weights and momentum) as the estimate counts "
             "it, which knows no graph's bytes: stored graphs count their "
             "inputs only.", "",
             "| J | method | sequences/s | x backprop | most kept on a stage, "
             "MiB | bound by |", "|---:|---|---:|---:|---:|---|"]
    for stages in AT_SCALE_STAGES:
        # Every schedule of one estimate at once (the estimate builds the
        # 64-block model, a minute or two a call): with the graphs stored,
        # and not.
        runs = {}
        for store in ([], STORED):
            out = run([petra, "simulate"] + AT_SCALE_MODEL + AT_SCALE_FLEET +
                      ["--stages", str(stages), "--micro-batches", "1024",
                       "--group", str(4 * stages), "--schedule", "all",
                       "--json"] + store, 900)
            try:
                runs[bool(store)] = {s["schedule"]: s
                                     for s in json.loads(out)["schedules"]}
            except (ValueError, KeyError, TypeError) as e:
                raise BenchError(f"petra simulate gave no result: {e}")
        base = None
        for method, _, schedule, sim_flags in [
                ("backprop", [], "backprop", [])] + METHODS[1:]:
            try:
                s = runs[bool(sim_flags)][schedule]
            except KeyError:
                raise BenchError(f"petra simulate gave no {schedule} row")
            rate = s["steady_samples_per_second"]
            base = base or rate
            kept = max(x["total_bytes"] for x in s["stages"])
            lines.append(f"| {stages} | {method} | {rate:,.1f} | "
                         f"{rate / base:.2f} | {kept / 2**20:,.0f} | "
                         f"{s['bound']} |")
    return "\n".join(lines)


def main(argv):
    a = parse_args(argv)
    out, everything = [], []
    with tempfile.TemporaryDirectory(prefix="petra-race-") as folder:
        for name in a.networks:
            for stages in a.stages:
                rows, loss = race(a, name, stages, folder)
                everything.append({"network": name, "stages": stages,
                                   "rows": rows})
                out.append(table(name, stages, rows, loss))
                if a.plots:
                    file = curves(a.plots, name, stages, rows, loss)
                    out.append(f"![{name}, J = {stages}: the metric against "
                               f"wall-clock time](images/{file})")
        if a.at_scale:
            out.append(at_scale(a.petra))
    print("\n\n".join(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(everything, f, indent=1)
    return 0


if __name__ == "__main__":
    main_guard("race", main)
