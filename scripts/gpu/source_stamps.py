#!/usr/bin/env python3
"""Keeps a build folder's view of the source tree across fresh copies.

The device tool copies the working tree afresh for every command, so every
file may carry a new modification time and make would rebuild everything.
`save` records each source file's hash and modification time beside the
build; `restore` gives every file whose content is unchanged its recorded
time back, so only files that really changed (or are new) are rebuilt.

usage: source_stamps.py save|restore STAMPS_FILE   (run in the repository)
"""

import hashlib
import json
import os
import sys

# Build outputs and carried packages, not sources.
SKIP_DIRS = {".git", ".gpu", ".cache", ".tools", "node_modules", "__pycache__"}


def sources():
    for root, dirs, files in os.walk("."):
        dirs[:] = [d for d in dirs
                   if d not in SKIP_DIRS and not d.startswith("build")]
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                yield path


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


def main(argv):
    if len(argv) != 3 or argv[1] not in ("save", "restore"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    verb, stamps = argv[1], argv[2]
    if verb == "save":
        table = {p: [digest(p), os.stat(p).st_mtime_ns] for p in sources()}
        tmp = stamps + ".tmp"
        with open(tmp, "w") as f:
            json.dump(table, f)
        os.replace(tmp, stamps)
        print(f"source_stamps: recorded {len(table)} files")
        return 0
    if not os.path.exists(stamps):
        print("source_stamps: no stamps yet (a first build)")
        return 0
    with open(stamps) as f:
        table = json.load(f)
    kept = changed = 0
    for p in sources():
        entry = table.get(p)
        if entry and entry[0] == digest(p):
            os.utime(p, ns=(entry[1], entry[1]))
            kept += 1
        else:
            changed += 1
    print(f"source_stamps: {kept} files unchanged since the last build, "
          f"{changed} changed or new")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
