"""Builds the petra package, generating the gRPC stubs from ../proto.

The stubs (petra/v1/*_pb2.py, *_pb2_grpc.py) are never checked in: they
are written at build time by protoc with gRPC's Python plugin (Debian's
protobuf-compiler and protobuf-compiler-grpc), so they always match the
protos and the protobuf runtime of the machine (gen_stubs.py).
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_stubs import generate_stubs  # noqa: E402


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate_stubs(self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
