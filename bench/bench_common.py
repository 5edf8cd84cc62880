"""What the benchmark drivers share: their error type, running a command,
and the entry point that turns errors into a message and an exit code."""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BenchError(Exception):
    """A benchmark step failed; the message says which and why."""


def run(argv, timeout, env=None, cwd=None):
    """Runs a command (in `env`, default this one's, and folder `cwd`);
    returns its stdout; raises BenchError with its output when it fails or
    outlives `timeout` seconds."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True,
                             timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout} s: {' '.join(argv)}")
    if out.returncode != 0:
        raise BenchError(f"exit {out.returncode}: {' '.join(argv)}\n"
                         f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout


def add_petra_arg(parser):
    """The --petra flag every driver of the petra binary takes."""
    parser.add_argument("--petra",
                        default=os.path.join(ROOT, "build", "bin", "petra"),
                        help="the petra binary (default: build/bin/petra)")


def check_petra(parser, path):
    """Exits through `parser` when `path` is not an executable."""
    if not os.access(path, os.X_OK):
        parser.error(f"--petra: {path} is not an executable "
                     "(build first: bash scripts/build.sh)")


def train_report(petra, flags, timeout, env=None):
    """Runs `petra train --quiet --report FILE` + flags; returns the report
    (a dict); raises BenchError, with the command's output, when it fails.
    It runs in a temporary folder, where the model it keeps goes too."""
    with tempfile.TemporaryDirectory(prefix="petra-bench-") as d:
        report = os.path.join(d, "report.json")
        # The run starts in the temporary folder: a relative path would
        # not lead back.
        run([os.path.abspath(petra), "train", "--quiet", "--report", report] +
            flags,
            timeout, env=env, cwd=d)
        try:
            with open(report) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise BenchError(f"petra train wrote no usable report: {e}")


def parse_two_builds(parser, argv, rounds, rest_help, owned):
    """The arguments of a driver that runs two builds side by side:
    --old-bin, --new-bin, --rounds (default `rounds`), --timeout, and the
    flags after `--` for what it runs (`rest_help`), which may not set any of
    `owned`. Returns (args, rest); refuses bad values through `parser`."""
    parser.add_argument("--old-bin", required=True,
                        help="the reference build's bin directory")
    parser.add_argument("--new-bin", required=True,
                        help="the changed build's bin directory")
    parser.add_argument("--rounds", type=int, default=rounds,
                        help=f"runs of each build, alternating (default "
                             f"{rounds})")
    parser.add_argument("--timeout", type=int, default=3600,
                        help="seconds one run may take (default 3600)")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=rest_help)
    args = parser.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    for flag in owned:
        if any(a == flag or a.startswith(flag + "=") for a in rest):
            parser.error(f"{flag} is set here, not passed through")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args, rest


def main_guard(name, main):
    """Runs main(argv) and exits: 1 with the message on BenchError, 130 on
    Ctrl-C."""
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"{name}: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
