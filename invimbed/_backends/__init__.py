"""Accelerated backends of the imbedding sweep: numba (CPU) and cupy (GPU).

`invimbed.solve_imbedding` hands a validated `Setup` to `sweep_backend` (registered
below, see `invimbed._core.runtime.backends`) when ``backend != "numpy"`` (numba's adaptive
jet sweep, ``method="RK45"`` or ``"RK23"``, is
`invimbed._backends.sweep_adaptive`). Both backends run the fixed-step sweeps (``"euler"``,
``"midpoint"``, ``"rk4"``; ``"disc"`` for the jet) of the jet closure of order 1 (with
its error estimate); cupy also runs the stencil closure (numba does not: it lost to
vectorised numpy, docs/performance.md). They step the numpy sweep's schedule
(`invimbed._core.integrators.schedule`), take finite differences by the one step rule
(`invimbed._core.derivatives.finite_difference`), and their results are assembled by the
core (`invimbed._backends._result.finish`), so that they agree with ``backend="numpy"``
to rounding. What they cannot run raises a `ValueError` that names the alternative;
there is no silent fallback to numpy.

Contract for implementers of a backend
--------------------------------------
1. Add its name to `invimbed._core.runtime.backends.BACKENDS` (the one list of names), a branch
   to `sweep_backend`, and register what it runs below (`register_backend`; the core
   asks `get_backend`, never imports this package); import the backend's heavy
   dependency only inside the factory or the branch, and raise an `ImportError` naming
   the extra (``pip install invimbed[...]``) when it is missing.
2. Take the steps of `build_schedule` and the derivatives of the problem's provider;
   return the `ImbeddingResult` of `invimbed._backends._result.finish`, i.e. of the
   core's `collect_results` (it computes the depth gradient; non-finite values end the
   sweep for the whole batch at the first failing stage, as in the numpy sweep).
3. Test it against ``backend="numpy"`` in ``tests/test_backends.py`` (parametrised,
   skipped when the dependency or the device is absent).
"""

from __future__ import annotations

from typing import Any

from .._core.runtime.backends import BACKENDS as _ALL, register_backend
from .._core.results.results import ImbeddingResult
from .._core.setup.arguments import Setup

#: The accelerated backends (`invimbed._core.runtime.backends.BACKENDS` but the core's numpy).
BACKENDS = _ALL[1:]

#: The methods the accelerated backends run.
SUPPORTED_METHODS = ("euler", "midpoint", "rk4", "disc")


def sweep_backend(backend: str, setup: Setup, *, closure: str, order: int, method: str,
                  step: float | None, difference: str, delta: Any, estimate_error: bool,
                  rtol: float, atol: float, memory_budget: int | None = None,
                  **options: Any) -> ImbeddingResult:
    """Run the imbedding sweep of ``setup`` on ``backend`` (``"numba"`` or ``"cupy"``).

    Parameters are those of `invimbed.solve_imbedding`, validated. ``rtol`` and ``atol``
    only matter to adaptive methods, which the accelerated backends do not run.
    ``memory_budget`` (bytes, None for the default) bounds the numba sweep's host
    memory (`invimbed._core.sweep.memory.check_compiled`); the cupy sweep's arrays are
    on the device, which it does not bound.

    Raises
    ------
    ValueError
        For a method, closure or order the backend does not run (the message lists what
        it runs), or an option it does not know.
    ImportError
        If the backend's package is not installed.
    MemoryError
        ``backend="numba"``: if the sweep's outputs and arrays exceed ``memory_budget``.
    BackendCompileError
        ``backend="numba"``: a user function numba cannot compile.
    """
    if method not in SUPPORTED_METHODS:
        extra = (" and, for closure='jet', the adaptive 'RK45' and 'RK23'"
                 if backend == "numba" else "")
        raise ValueError(
            f"backend={backend!r} runs the fixed-step methods "
            f"{', '.join(repr(m) for m in SUPPORTED_METHODS)} (with `step`){extra}, but got "
            f"method={method!r}; choose one of them, or use backend='numpy' for scipy's "
            f"adaptive solvers")
    if backend == "numba":
        from ._numba import sweep_numba

        return sweep_numba(setup, closure=closure, order=order, method=method, step=step,
                           difference=difference, delta=delta, estimate_error=estimate_error,
                           memory_budget=memory_budget, **options)
    if backend == "cupy":
        from ._xp import sweep_cupy

        return sweep_cupy(setup, closure=closure, order=order, method=method, step=step,
                          difference=difference, delta=delta, estimate_error=estimate_error,
                          **options)
    raise ValueError(f"`backend` must be one of {', '.join(map(repr, _ALL))}, but got "
                     f"{backend!r}")


def _adaptive() -> Any:
    from .sweep_adaptive import sweep_numba_adaptive

    return sweep_numba_adaptive


def _ensemble() -> Any:
    from .ensemble_numba import ensemble_numba, row_cost

    return ensemble_numba, row_cost


for _name in BACKENDS:
    register_backend(_name, "sweep", lambda: sweep_backend)
register_backend("numba", "sweep_adaptive", _adaptive)
register_backend("numba", "ensemble", _ensemble)


def __getattr__(name: str) -> Any:
    if name == "BackendCompileError":
        from ._numba_functions import BackendCompileError

        return BackendCompileError
    raise AttributeError(name)


__all__ = ["BACKENDS", "SUPPORTED_METHODS", "sweep_backend"]
