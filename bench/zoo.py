#!/usr/bin/python3
"""The zoo's ImageNet-size entries (issue 35): each network's parameter count
beside its reference, and a short training run on synthetic 224x224 data
(two stages, the in-process runner) to show that it trains: samples/s and
the first epoch's loss. Prints a Markdown table.

References: the PETRA paper's Table 2 (RevNet50, 30.4M); torchvision's
documented counts (resnet50 25,557,032, resnet101 44,549,160, vit_b_16
86,567,656); RevNet101 by construction (RevNet50 plus exactly ResNet101's
extra blocks over ResNet50); ViT-B as vit_b_16 less its class token and that
token's position embedding (2 x 768: our heads average the patch tokens);
RevViT-B as ViT-B plus its head reading both streams (768 x 1000 + 2 x 768),
the RevViT paper's "87M".
"""

import argparse
import json
import os
import sys

from bench_common import BenchError, main_guard, run, train_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["--embed-dim", "768", "--depth", "12", "--heads", "12",
        "--mlp-ratio", "4", "--patch-size", "16", "--stem", "patch"]
VIT_B = 86567656 - 2 * 768
RESNET101_OVER_50 = 44549160 - 25557032
ENTRIES = [
    # (name, flags, reference(counts so far) -> (value, tolerance), source)
    ("RevNet50", ["--arch", "revnet50"], lambda c: (30.4e6, 0.05e6),
     "the PETRA paper's 30.4M"),
    ("ResNet50", ["--arch", "resnet50"], lambda c: (25557032, 0),
     "torchvision resnet50"),
    ("RevNet101", ["--arch", "revnet101"],
     lambda c: (c["RevNet50"] + RESNET101_OVER_50, 0),
     "RevNet50 + (ResNet101 - ResNet50)"),
    ("ResNet101", ["--arch", "resnet101"], lambda c: (44549160, 0),
     "torchvision resnet101"),
    ("ViT-B/16", ["--arch", "vit"] + BASE, lambda c: (VIT_B, 0),
     "torchvision vit_b_16 less its class token"),
    ("RevViT-B/16", ["--arch", "revvit"] + BASE,
     lambda c: (c["ViT-B/16"] + 768 * 1000 + 2 * 768, 0),
     "ViT-B + the two-stream head (RevViT paper: 87M)"),
]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--train-samples", type=int, default=16,
                        help="synthetic training images per network (0: "
                             "count parameters only)")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=1800,
                        help="seconds per training run")
    args = parser.parse_args(argv)
    if args.train_samples < 0 or args.micro_batch < 1:
        parser.error("--train-samples must be >= 0 and --micro-batch >= 1")
    petra = os.path.join(args.bin_dir, "petra")
    rows = []
    counts = {}
    for name, flags, reference, source in ENTRIES:
        info = json.loads(run([petra, "model-info", "--variant", "imagenet",
                               "--json"] + flags, 600))
        counts[name] = info["params"]
        value, tolerance = reference(counts)
        row = {"name": name, "params": info["params"],
               "stages": len(info["stages"]), "reference": value,
               "equal": abs(info["params"] - value) <= tolerance,
               "source": source}
        if args.train_samples > 0:
            print(f"zoo: training {name} on {args.train_samples} synthetic "
                  f"224x224 images ...", file=sys.stderr, flush=True)
            report = train_report(petra, [
                "--runner", "in-process", "--variant", "imagenet",
                "--dataset", "synthetic", "--stages", "2",
                "--micro-batch", str(args.micro_batch),
                "--train-limit", str(args.train_samples),
                "--test-limit", str(args.micro_batch), "--epochs", "1"] +
                flags, args.timeout)
            row["samples_per_second"] = report["samples_per_second"]
            row["loss"] = report.get("train_loss")
        rows.append(row)
    trained = args.train_samples > 0
    print(f"ImageNet variant (224x224, 1000 classes)"
          + (f"; trained on {args.train_samples} synthetic images, micro-batch "
             f"{args.micro_batch}, 2 stages, in-process, on the CPU"
             if trained else "") + ".\n")
    head = ("| network | per-block stages | parameters | reference | source | "
            "matches |")
    rule = "|---|---:|---:|---:|---|---|"
    if trained:
        head += " samples/s | epoch's train loss |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    failed = []
    for r in rows:
        if not r["equal"]:
            failed.append(r["name"])
        reference = (f"{r['reference']:,}" if r["reference"] % 1000 else
                     f"{r['reference'] / 1e6:.1f}M")
        line = (f"| {r['name']} | {r['stages']} | {r['params']:,} | "
                f"{reference} | {r['source']} | "
                f"{'yes' if r['equal'] else 'NO'} |")
        if trained:
            loss = r["loss"]
            line += (f" {r['samples_per_second']:.2f} | "
                     f"{loss:.3f} |" if loss is not None else " - |")
        print(line)
    if failed:
        raise BenchError(f"parameter counts differ from their references: "
                         f"{', '.join(failed)}")
    return 0


if __name__ == "__main__":
    main_guard("zoo", main)
