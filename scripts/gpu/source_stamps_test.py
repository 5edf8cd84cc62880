#!/usr/bin/env python3
"""CI: after a fresh copy of the tree (every file newer), source_stamps.py
restore gives unchanged files their recorded times back and leaves changed
and new ones newer, so make rebuilds only those; build folders are not
sources."""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    with tempfile.TemporaryDirectory() as tree:
        files = {"a.cc": "int a;", "sub/b.h": "int b;", "c.txt": "c",
                 "build/x.o": "object", "build-cuda/y.o": "object"}
        for path, text in files.items():
            os.makedirs(os.path.join(tree, os.path.dirname(path)) or tree,
                        exist_ok=True)
            with open(os.path.join(tree, path), "w") as f:
                f.write(text)
            os.utime(os.path.join(tree, path), ns=(10**18, 10**18))
        stamps = os.path.join(tree, "stamps.json")

        def stamp(verb):
            subprocess.run([sys.executable, os.path.join(HERE, "source_stamps.py"),
                            verb, stamps], cwd=tree, check=True)

        stamp("save")
        # The fresh copy: every file newer; one changed, one new.
        later = 2 * 10**18
        for path in files:
            os.utime(os.path.join(tree, path), ns=(later, later))
        with open(os.path.join(tree, "sub/b.h"), "w") as f:
            f.write("int b2;")
        with open(os.path.join(tree, "d.cc"), "w") as f:
            f.write("int d;")
        os.utime(os.path.join(tree, "sub/b.h"), ns=(later, later))
        os.utime(os.path.join(tree, "d.cc"), ns=(later, later))
        stamp("restore")

        def mtime(path):
            return os.stat(os.path.join(tree, path)).st_mtime_ns

        failures = []
        for path, want in [("a.cc", 10**18), ("c.txt", 10**18),
                           ("sub/b.h", later), ("d.cc", later),
                           ("build/x.o", later), ("build-cuda/y.o", later)]:
            if mtime(path) != want:
                failures.append(f"{path}: mtime {mtime(path)}, want {want}")
        # A missing stamps file is a first build: nothing to restore.
        os.remove(stamps)
        stamp("restore")
        if failures:
            print("source_stamps_test: " + "; ".join(failures), file=sys.stderr)
            return 1
    print("source_stamps_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
