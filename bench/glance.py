"""The "results at a glance" of docs/BENCHMARKS.md, read from its sections.

Each claim names the table cell (or the span of a column) that backs it;
bench/update_doc.py rewrites the summary from the sections every time it
writes one, so the summary cannot drift from the tables. A claim whose cell
is missing says so ("not measured") instead of keeping an old figure.

    python3 bench/update_doc.py --glance docs/BENCHMARKS.md   # rewrites it

A library of update_doc.py's, which reads the sections: nothing here
imports it back.
"""

import re


def tables(body):
    """Every Markdown table of `body`: a list of rows, each a dict from the
    header's column names to the cells."""
    out, header, rows = [], None, []
    for line in body.split("\n") + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                # A repeated column name gets " (2)", " (3)"...: the first
                # keeps its name.
                header = []
                for c in cells:
                    n = header.count(c) + sum(
                        h.startswith(c + " (") for h in header)
                    header.append(c if n == 0 else f"{c} ({n + 1})")
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(dict(zip(header, cells)))
            continue
        if header is not None:
            out.append(rows)
        header, rows = None, []
    return out


def _matches(row, where):
    return all(row.get(k, "").startswith(v) for k, v in where.items())


def cell(column, **where):
    """The first row's `column` whose cells start with `where`'s values
    (keys: column names, with '_' for ' ')."""
    where = {k.replace("_", " "): v for k, v in where.items()}

    def read(body):
        for rows in tables(body):
            for row in rows:
                if column in row and _matches(row, where):
                    return row[column]
        return None
    return read


def span(column, **where):
    """The least and greatest of `column` over the first table that has
    it (rows filtered as by `cell`)."""
    where = {k.replace("_", " "): v for k, v in where.items()}

    def read(body):
        for rows in tables(body):
            values = [r[column] for r in rows
                      if column in r and _matches(r, where)]
            numbers = [(float(re.sub(r"[^0-9.+-]", "", v)), v)
                       for v in values if re.search(r"\d", v)]
            if numbers:
                lo, hi = min(numbers)[1], max(numbers)[1]
                return lo if lo == hi else f"{lo} to {hi}"
        return None
    return read


def simulated_speedup(schedule, stages):
    """The simulator's speed-up of `schedule` in the run of `stages`
    stages (its text table, as `petra simulate` prints it)."""
    def read(body):
        runs = re.split(r"^Stages: ", body, flags=re.M)[1:]
        for run in runs:
            if not run.startswith(f"{stages},"):
                continue
            m = re.search(rf"^{schedule}\s+\S+\s+\S+\s+\S+\s+(\S+x)", run,
                          re.M)
            if m:
                return m.group(1)
        return None
    return read


# (section, claim, reader). In the order of the document.
CLAIMS = [
    ("throughput", "PETRA over reversible backprop, RevNet18 on 2 and 4 "
     "fleet stages on this CPU (the paper's Table 5 speed-up)",
     span("PETRA / rev. backprop")),
    ("throughput", "What the fleet keeps of the in-process runner's rate "
     "(shared-memory data channel)", span("fleet / in-process (shm)")),
    ("fleets", "PETRA's speed-up over backprop predicted from FLOPs, "
     "RevNet18 CIFAR on 10 V100-class devices (the paper measured 3.0x)",
     simulated_speedup("petra", 10)),
    ("memory", "PETRA's memory saving over PipeDream's stashes, RevNet18 "
     "CIFAR per block, micro-batch 64 (paper, Table 3)",
     cell("saving vs PipeDream", configuration="PETRA (neither)")),
    ("accuracy", "PETRA k=1, one stage per block: test accuracy against "
     "backprop (RevNet18, Fashion-MNIST)",
     cell("vs backprop", training="PETRA k=1", stages="per-block")),
    ("accuracy", "PETRA k=1 on 2 stages against backprop",
     cell("vs backprop", training="PETRA k=1", stages="2")),
    ("long_run", "PETRA k=1 per block against backprop, the paper's "
     "longer recipe", cell("vs backprop", training="PETRA k=1",
                           stages="per-block")),
    ("forward_gradient", "Forward gradients (local guess) per block "
     "against backprop",
     cell("vs backprop", training="forward gradient (local guess)")),
    ("transformer", "RevViT, PETRA k=4 per block against backprop",
     cell("vs backprop", training="PETRA k=4", stages="per-block")),
    ("transport", "Shared-memory data channel, host to host (GB/s)",
     cell("GB/s", path="host to host through shared memory")),
    ("precision", "PETRA on 2 stages, bf16 + channels_last, against stock "
     "PyTorch RevNet18 bf16 (CPU)",
     cell("/ stock RevNet18 bf16",
          run="PETRA, 2 stages, bf16 + channels_last")),
    ("gpu", "GPU: the fleet against the in-process runner, fp32 (samples/s)",
     lambda body: _ratio(body, "PETRA, 2 stages, fleet, fp32",
                         "PETRA, 2 stages, in-process, fp32")),
    ("gpu", "GPU: in-process PETRA bf16 against stock PyTorch RevNet18 "
     "bf16 + channels_last",
     cell("/ stock RevNet18 bf16", run="PETRA, 2 stages, in-process, bf16")),
]


def _ratio(body, numerator, denominator):
    a = cell("samples/s", run=numerator)(body)
    b = cell("samples/s", run=denominator)(body)
    try:
        x, y = (float(v.replace(",", "")) for v in (a, b))
    except (AttributeError, ValueError):
        return None
    return f"{x / y:.2f} ({a} / {b})"


def heading(body):
    m = re.search(r"^## (.+)$", body, re.M)
    return m.group(1).strip() if m else None


def anchor(title):
    """GitHub's anchor for a heading."""
    slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    return "#" + slug


def render(sections):
    """The summary from `sections` (name -> body)."""
    lines = ["## Results at a glance", "",
             "Each figure is read from the section it names (bench/glance.py"
             " writes this table whenever bench/update_doc.py writes a "
             "section).", "",
             "| claim | figure | section |", "|---|---|---|"]
    for name, claim, read in CLAIMS:
        body = sections.get(name)
        figure = read(body) if body else None
        title = heading(body) if body else None
        where = f"[{title}]({anchor(title)})" if title else name
        lines.append(f"| {claim} | {figure or 'not measured'} | {where} |")
    return "\n".join(lines)

