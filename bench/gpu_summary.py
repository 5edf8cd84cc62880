#!/usr/bin/python3
"""The one table that ends scripts/bench.sh's gpu section (issue 48).

Reads what the section wrote into its results folder (the stock-PyTorch
yardstick, each `petra train --report`, the transport tables, the RevViT
run) and, with --ctest, the gpu tests' CTest log, and prints one row per
check with its figure and its target. A check whose input is missing says
"not measured" instead of a figure.

usage: gpu_summary.py --results DIR [--ctest CTEST.log]
"""

import argparse
import glob
import json
import os
import re
import sys

TRAIN = re.compile(
    r"^gpu-train-(?P<mode>[a-z_]+)-(?P<stages>per-block|\d+)-"
    r"(?P<runner>in-process|fleet)-(?P<precision>fp32|bf16-cl|bf16-wire|bf16)"
    r"(?:-(?P<transport>cuda_ipc|shm|grpc_bulk|grpc|auto))?\.json$")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def runs(results):
    """Every training report, keyed by (mode, stages, runner, precision,
    transport)."""
    out = {}
    for path in glob.glob(os.path.join(results, "gpu-train-*.json")):
        m = TRAIN.match(os.path.basename(path))
        report = load(path)
        if m and report and isinstance(report.get("samples_per_second"),
                                       (int, float)):
            key = (m["mode"], m["stages"], m["runner"], m["precision"],
                   m["transport"] or "")
            out[key] = report
    return out


def rebuild_error(report):
    worst = None
    for stage in report.get("stages", []):
        e = stage.get("rebuild_error", {})
        if e.get("samples", 0) > 0:
            worst = max(worst or 0.0, e.get("max", 0.0))
    return worst


def ctest_row(path):
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return "not measured (no CTest log)"
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)",
                  text)
    if not m:
        return "no CTest summary in the log"
    skipped = len(re.findall(r"\(Skipped\)$", text, re.M))
    total, failed = int(m[3]), int(m[2])
    return f"{total - failed - skipped} passed, {failed} failed, " \
           f"{skipped} skipped of {total}"


def transport_rates(path):
    """{transport: [(MiB, GB/s), ...]} from petra_bench_transport's tables."""
    rates = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return rates
    size = None
    names = {"(cuda_ipc)": "cuda_ipc", "(shm)": "shm", "(grpc_bulk": "grpc_bulk",
             "over gRPC": "grpc"}
    for line in lines:
        m = re.match(r"^([0-9.]+) MiB float32 tensors", line)
        if m:
            size = float(m[1])
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if size is None or len(cells) != 3 or not cells[0].startswith(
                ("device to device", "host to host")):
            continue
        for needle, name in names.items():
            if needle in cells[0]:
                try:
                    rates.setdefault(name, []).append((size, float(cells[2])))
                except ValueError:  # not measured: the row says why
                    rates.setdefault(name, []).append((size, cells[1]))
                break
    return rates


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True,
                   help="the gpu section's results folder")
    p.add_argument("--ctest", help="the gpu tests' CTest log")
    args = p.parse_args(argv)
    if not os.path.isdir(args.results):
        p.error(f"--results {args.results}: not a folder")
    rows = []  # (check, figure, target)
    rows.append(("every `gpu` test",
                 ctest_row(args.ctest) if args.ctest else
                 "not measured (no --ctest)", "all pass, none skipped"))
    r = runs(args.results)
    stock = load(os.path.join(args.results, "gpu-stock.json")) or {"rows": []}
    by_key = {(s["arch"], s["precision"]): s["samples_per_second"]
              for s in stock.get("rows", [])}

    def rate(key):
        return r[key]["samples_per_second"] if key in r else None

    for precision in ("fp32", "bf16"):
        base = rate(("petra", "2", "in-process", precision, ""))
        for transport in ("cuda_ipc", "shm", "grpc_bulk"):
            fleet = rate(("petra", "2", "fleet", precision, transport))
            if fleet is None and precision == "bf16":
                continue  # bf16 fleet rows are optional
            figure = ("not measured" if fleet is None or base is None
                      else f"{fleet / base:.2f} ({fleet:,.0f} / {base:,.0f} "
                           "samples/s)")
            rows.append((f"fleet of 2 servers on one GPU, {transport}, "
                         f"{precision} / in-process", figure,
                         ">= 0.9" if transport == "cuda_ipc" else ""))
    for stages in ("2", "per-block"):
        for precision, stock_key in (("bf16", ("resnet18", "bf16")),
                                     ("fp32", ("resnet18", "fp32"))):
            ours = rate(("petra", stages, "in-process", precision, ""))
            yard = by_key.get(stock_key)
            figure = ("not measured" if ours is None or yard is None
                      else f"{ours / yard:.2f} ({ours:,.0f} / {yard:,.0f} "
                           "samples/s)")
            rows.append((f"in-process PETRA {stages.replace('-', ' ')}"
                         f"{' stages' if stages.isdigit() else ''}, "
                         f"{precision} / stock ResNet18 {precision}"
                         f"{' + channels_last' if precision == 'bf16' else ''}",
                         figure, ">= 0.6" if precision == "bf16" and
                         stages == "2" else ""))
    errors = [e for k, rep in r.items() if k[3].startswith("bf16")
              for e in [rebuild_error(rep)] if e is not None]
    rows.append(("bf16 rebuild error (max of every stage and run)",
                 f"{max(errors):.1e}" if errors else "not measured", ""))
    rates = transport_rates(os.path.join(args.results, "gpu-transport.md"))
    for name in ("cuda_ipc", "shm", "grpc_bulk", "grpc"):
        got = rates.get(name)
        figure = ("not measured" if not got else ", ".join(
            f"{mib:g} MiB: " + (gb if isinstance(gb, str) else f"{gb:.2f}")
            for mib, gb in got))
        rows.append((f"transport {name}, GB/s", figure, ""))
    vit = load(os.path.join(args.results, "gpu-revvit-conv.json"))
    rows.append(("RevViT, conv stem, one epoch (bf16, 2 stages)",
                 "not measured" if not vit else
                 f"{vit.get('samples_per_second', 0):,.0f} samples/s, test "
                 f"accuracy {100 * vit.get('test_accuracy', 0):.2f}%", "runs"))
    print("| check | result | target |")
    print("|---|---|---|")
    for check, figure, target in rows:
        print(f"| {check} | {figure} | {target} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
