"""Builds the petra package, generating the gRPC stubs from ../proto.

The stubs (petra/v1/*_pb2.py, *_pb2_grpc.py) are never checked in: they
are written at build time by protoc with gRPC's Python plugin (Debian's
protobuf-compiler and protobuf-compiler-grpc), so they always match the
protos and the protobuf runtime of the machine (gen_stubs.py).
"""

import atexit
import os
import shutil
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_stubs import generate_stubs  # noqa: E402


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate_stubs(self.build_lib)


# pip builds in the source folder: setuptools' build/ and petra.egg-info/
# go to a scratch folder instead, removed when the build ends, so that
# `pip install ./python` leaves the tree as it found it.
_scratch = tempfile.mkdtemp(prefix="petra-python-build-")
atexit.register(shutil.rmtree, _scratch, ignore_errors=True)

setup(cmdclass={"build_py": BuildWithStubs},
      options={"build": {"build_base": os.path.join(_scratch, "build")},
               "egg_info": {"egg_base": _scratch}})
