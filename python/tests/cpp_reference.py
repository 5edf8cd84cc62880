"""What the Python tests that compare with the C++ build share.

`import_torch()` imports torch, rerunning the calling test under Debian's
/usr/bin/python3 (whose dist-packages hold python3-torch) when the python3
that runs it lacks torch. `binary(name)` finds a C++ test binary:
$PETRA_BIN_DIR/name, or build/bin/name of this checkout when PETRA_BIN_DIR
is unset; missing under an explicit PETRA_BIN_DIR fails the test (the
caller said where the build is), missing under the default skips it.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
SYSTEM_PYTHON = "/usr/bin/python3"
BIN_DIR_ENV = "PETRA_BIN_DIR"
DEFAULT_BIN_DIR = os.path.join(REPO_ROOT, "build", "bin")
REEXEC_ENV = "PETRA_PYTHON_TEST_REEXEC"


def import_torch(script):
    """Returns the torch module; reruns `script` under Debian's python3 if
    this interpreter has none."""
    try:
        import torch
        return torch
    except ImportError:
        if (os.path.exists(SYSTEM_PYTHON)
                and os.path.realpath(sys.executable)
                != os.path.realpath(SYSTEM_PYTHON)
                and not os.environ.get(REEXEC_ENV)):
            os.environ[REEXEC_ENV] = "1"
            os.execv(SYSTEM_PYTHON,
                     [SYSTEM_PYTHON, os.path.abspath(script)] + sys.argv[1:])
        raise


def bin_dir():
    """The directory of the C++ binaries, and whether it was asked for."""
    if os.environ.get(BIN_DIR_ENV):
        return os.environ[BIN_DIR_ENV], True
    return DEFAULT_BIN_DIR, False


def binary(name):
    """Path of the C++ binary `name`; skips or fails the test if missing."""
    directory, explicit = bin_dir()
    path = os.path.join(directory, name)
    if os.access(path, os.X_OK):
        return path
    if explicit:
        raise AssertionError(f"{BIN_DIR_ENV}={directory}: no executable "
                             f"{name} there")
    raise unittest.SkipTest(
        f"{path} not found: build the C++ tree first (or set {BIN_DIR_ENV} "
        f"to the directory of {name})")
