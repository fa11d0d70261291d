"""The CUDA kernel compiles for a real GPU (PTX for sm_90, an H100/H200), without one.

The simulator runs the kernels as Python and so accepts code that numba-cuda's compiler
would refuse (numpy calls the device lacks, allocations). This test types and compiles
the kernel with numba-cuda's NVVM, in a process of its own without the simulator; the
device query that compilation makes is answered with compute capability 9.0. Slow (a
minute or more of CPU): ``-m slow``; skipped where NVVM is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys, types
    sys.path[:0] = [{root!r}, {tests!r}]
    from numba import cuda, float64 as f8, int64 as i8
    try:
        from numba.cuda.cudadrv import nvvm
        nvvm.NVVM()
    except Exception as exc:
        print("NO-NVVM", exc)
        raise SystemExit(0)
    import numba.cuda.dispatcher as dispatcher
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    from problems import sympy_pendulum
    from invimbed._backends._cuda_ensemble_kernel import build_kernel
    kernel, width = build_kernel(sympy_pendulum().derivative_provider, 2, 2, 2, {method!r})
    A1, A2, I1, I2 = f8[::1], f8[:, ::1], i8[::1], i8[:, ::1]
    # rows, X, depths, q, knots, values, stops, num, max_steps, dense, then the outputs
    # z, value, adjoint, param_grad, depth_grad, nsteps, nfev, status, t, h_lambda
    sig = (I1, A2, A1, f8, A1, A2, A1, A1, i8, f8[:, :, ::1], A2, A1, A2, A2, A1, I1, I1,
           I2, A1, A1)
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    assert ".entry" in ptx
    print("PTX", len(ptx))
""")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["RK45"])
def test_the_ensemble_kernel_compiles_to_ptx(method):
    pytest.importorskip("numba.cuda")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    code = SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"), method=method)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    if "NO-NVVM" in out.stdout:
        pytest.skip(f"numba-cuda's NVVM is not installed: {out.stdout.strip()}")
    assert "PTX" in out.stdout
