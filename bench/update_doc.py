#!/usr/bin/python3
"""Replaces one section of docs/BENCHMARKS.md, keeping the others.

Sections sit between `<!-- section: NAME -->` and `<!-- end: NAME -->`
markers, in the order of SECTIONS, so one benchmark can be re-run without
re-running the rest. The body is read from standard input.
"""

import os
import re
import sys

SECTIONS = ["throughput", "fleets", "hosts", "memory", "capped", "zoo",
            "accuracy", "long_run",
            "forward_gradient", "feed", "peer", "transformer",
            "transformer_recipe", "staleness",
            "threads", "partition", "probe", "transport", "precision",
            "compare",
            "main_job", "gpu"]

HEADER = """# Benchmarks

Written by `bash scripts/bench.sh` (all sections) or `bash scripts/bench.sh
SECTION...` (only those; the others are kept). Every table comes from the
command printed above it, on the machine, commit and date written beside it.
Do not edit by hand.
"""


def main(argv):
    if len(argv) != 2 or argv[1] not in SECTIONS:
        print(f"usage: update_doc.py DOC SECTION < body; SECTION is one of "
              f"{', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    path, name = argv
    body = sys.stdin.read().strip("\n")
    text = open(path).read() if os.path.exists(path) else ""
    found = {}
    for s in SECTIONS:
        m = re.search(rf"<!-- section: {s} -->\n(.*?)\n<!-- end: {s} -->",
                      text, re.S)
        if m:
            found[s] = m.group(1)
    found[name] = body
    out = [HEADER]
    for s in SECTIONS:
        if s in found:
            out.append(f"<!-- section: {s} -->\n{found[s]}\n<!-- end: {s} -->\n")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out))
    os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
