"""Generates the petra gRPC stubs from ../proto into a folder.

Used by setup.py (pip install) and by the CMake build (the tests run
against build/python): one recipe for both.
    python3 gen_stubs.py OUT_DIR   ->  OUT_DIR/petra/v1/*_pb2(_grpc).py
"""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.join(HERE, os.pardir, "proto")


def generate_stubs(out_dir):
    """protoc over every proto of petra/v1 into out_dir/petra/v1."""
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        sys.exit("petra: building needs protoc and grpc_python_plugin "
                 "(apt-get install protobuf-compiler protobuf-compiler-grpc)")
    source = os.path.join(PROTO_ROOT, "petra", "v1")
    if not os.path.isdir(source):
        sys.exit("petra: no protos at %s: build from the repository's "
                 "python/ folder (pip install ./python)" % source)
    protos = sorted(os.path.join(source, f) for f in os.listdir(source)
                    if f.endswith(".proto"))
    os.makedirs(os.path.join(out_dir, "petra", "v1"), exist_ok=True)
    subprocess.run([protoc, "-I", PROTO_ROOT, "--python_out", out_dir,
                    "--grpc_python_out", out_dir,
                    "--plugin=protoc-gen-grpc_python=" + plugin] + protos,
                   check=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gen_stubs.py OUT_DIR")
    generate_stubs(sys.argv[1])
