"""PyTorch adapter: the paper's discrete InImNet (section 3.1) and its imbedded
adjoint (Theorem 2), on the same recursions as the numpy core's ``method="disc"``.

Optional: needs PyTorch (``pip install torch==2.13.0`` then ``pip install invimbed[nn]``).
``import invimbed`` never imports this subpackage.
"""

try:
    import torch
except ImportError as exc:  # exercised by tests/test_nn.py with torch hidden
    raise ImportError(
        "invimbed.nn needs PyTorch, which is not installed. Install it first with "
        "`pip install torch==2.13.0` (or the 2.13.0 build for your platform and "
        "accelerator from https://pytorch.org), then `pip install invimbed[nn]`."
    ) from exc
del torch

from ._inimnet import InImNet as InImNet
from ._inimnet import imbedded_adjoint as imbedded_adjoint
from ._phi import MLP as MLP

__all__ = ["InImNet", "MLP", "imbedded_adjoint"]
