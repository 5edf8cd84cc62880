#!/usr/bin/python3
"""Replaces one section of docs/BENCHMARKS.md, keeping the others.

Sections sit between `<!-- section: NAME -->` and `<!-- end: NAME -->`
markers, in the order of SECTIONS, so one benchmark can be re-run without
re-running the rest. The body is read from standard input. The summary at
the top ("results at a glance", bench/glance.py) is rewritten from the
sections each time; `update_doc.py --glance DOC` rewrites only it.
"""

import os
import re
import sys

import glance

SECTIONS = ["throughput", "fleets", "hosts", "memory", "capped", "zoo",
            "accuracy", "long_run",
            "forward_gradient", "feed", "peer", "transformer",
            "transformer_recipe", "staleness",
            "threads", "partition", "probe", "transport", "precision",
            "replicas", "replicas_accuracy", "replicas_plan", "language_model",
            "concurrent", "micro_batch_cost", "fidelity_at_speed", "race",
            "exact_schedules",
            "compare",
            "main_job", "gpu"]

HEADER = """# Benchmarks

Written by `bash scripts/bench.sh` (all sections) or `bash scripts/bench.sh
SECTION...` (only those; the others are kept). Every table comes from the
command printed above it, on the machine, commit and date written beside it.
Do not edit by hand.
"""


def read_sections(text):
    """The sections of a document's `text`, by name."""
    found = {}
    for s in SECTIONS:
        m = re.search(rf"<!-- section: {s} -->\n(.*?)\n<!-- end: {s} -->",
                      text, re.S)
        if m:
            found[s] = m.group(1)
    return found


def read_readings(text):
    """What was written by hand after each section's end marker (a reading
    of its table), up to the next marker, by section name: kept as it is
    when the section is rewritten, which says nothing of its table."""
    readings = {}
    for s in SECTIONS:
        m = re.search(rf"<!-- end: {s} -->\n(.*?)(?=<!-- (section|glance)|\Z)",
                      text, re.S)
        if m and m.group(1).strip():
            readings[s] = m.group(1).strip("\n")
    return readings


def read_header(text):
    """The document's own text before the glance (its title and the list of
    sections), or HEADER for a new document."""
    head = text.split("<!-- glance -->")[0].strip("\n")
    return head + "\n" if head.startswith("# Benchmarks") else HEADER


def main(argv):
    glance_only = argv[:1] == ["--glance"] and len(argv) == 2
    if not glance_only and (len(argv) != 2 or argv[1] not in SECTIONS):
        print(f"usage: update_doc.py DOC SECTION < body, or update_doc.py "
              f"--glance DOC; SECTION is one of {', '.join(SECTIONS)}",
              file=sys.stderr)
        return 2
    path = argv[-1] if glance_only else argv[0]
    text = open(path).read() if os.path.exists(path) else ""
    found = read_sections(text)
    readings = read_readings(text)
    if not glance_only:
        found[argv[1]] = sys.stdin.read().strip("\n")
    out = [read_header(text),
           f"<!-- glance -->\n{glance.render(found)}\n<!-- end: glance -->\n"]
    for s in SECTIONS:
        if s in found:
            out.append(f"<!-- section: {s} -->\n{found[s]}\n<!-- end: {s} -->\n")
            if s in readings:
                out.append(readings[s] + "\n")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out))
    os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
