"""What the benchmark drivers share: their error type, running a command,
and the entry point that turns errors into a message and an exit code."""

import subprocess
import sys


class BenchError(Exception):
    """A benchmark step failed; the message says which and why."""


def run(argv, timeout, env=None):
    """Runs a command (in `env`, default this one's); returns its stdout;
    raises BenchError with its output when it fails or outlives `timeout`
    seconds."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True,
                             timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout} s: {' '.join(argv)}")
    if out.returncode != 0:
        raise BenchError(f"exit {out.returncode}: {' '.join(argv)}\n"
                         f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout


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
