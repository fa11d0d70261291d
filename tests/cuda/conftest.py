"""The CUDA kernels' tests run in numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``).

numba reads the variable when it is imported and numba.cuda picks the simulator when it
is first imported, so this file sets the variable and reloads numba's configuration as
pytest collects this folder, before any test imports numba.cuda (nothing else in the
package or the suite imports it). ``INVIMBED_CUDA_DEVICE=1`` runs the same tests on the
GPU instead (benchmarks/gpu_check.py does, on a machine that has one).

Skipped, with the reason, where numba-cuda is not installed, or where numba.cuda was
imported before (without the simulator) and no GPU is present: asked when the first test
of the folder runs (`pytest_runtest_setup`), so that only the worker that runs them
imports numba.cuda.
"""

from __future__ import annotations

import os
import sys

import pytest

ON_DEVICE = os.environ.get("INVIMBED_CUDA_DEVICE") == "1"
_BEFORE = "numba.cuda" in sys.modules
if not ON_DEVICE and not _BEFORE:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    try:
        from numba.core import config

        config.reload_config()
    except ImportError:
        pass


def _why_not() -> str | None:
    try:
        from numba import config, cuda
    except ImportError:
        return "numba-cuda is not installed (pip install invimbed[cuda])"
    if config.ENABLE_CUDASIM:
        return None
    if not cuda.is_available():
        return ("numba.cuda was imported without the simulator before this folder's "
                "conftest ran, and there is no GPU: run tests/cuda in a process of its own")
    return None


_WHY_NOT: list[str | None] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip this folder's tests, with `_why_not`'s reason, where they cannot run. Asked
    at the first test of the folder, not as it is collected: importing numba.cuda takes
    about 0.4 s of CPU, and every xdist worker collects the folder while one runs it."""
    if not _WHY_NOT:
        _WHY_NOT.append(_why_not())
    if _WHY_NOT[0] is not None:
        pytest.skip(_WHY_NOT[0])
