"""PETRA fleet from Python.

petra.models: the C++ model zoo (services/model) as PyTorch modules whose
state_dict matches the files `petra export` writes, so that trained weights
load with ``load_state_dict(torch.load(path), strict=True)`` and evaluate to
the same logits as the C++ evaluation.

petra.Client (petra/client.py): submit, watch, list, cancel and export jobs
on a coordinator, with the command line's connection settings. It needs
grpcio and protobuf, and the stubs petra.v1 generated from proto/ when the
package is built; models alone need only torch.
"""

import pkgutil

# petra.v1 (the generated stubs) may sit in another folder named petra on
# sys.path, as in the build tree's build/python; an installed package holds
# them itself.
__path__ = pkgutil.extend_path(__path__, __name__)

from petra import models  # noqa: E402

__all__ = ["models", "Client", "ClientError", "state_name"]


def __getattr__(name):
    # Imported on first use, so that `import petra` for models alone works
    # where grpcio is not installed.
    if name in ("Client", "ClientError", "state_name"):
        from petra import client
        return getattr(client, name)
    raise AttributeError("module 'petra' has no attribute %r" % name)
