"""The fixed-step schedule of a sweep, for the compiled and device kernels.

The schedule itself (nodes, steps, stages, the cut at ``max_steps``) is built in core,
by `invimbed._core.integrators.schedule.fixed_schedule`, the very one
`invimbed._core.integrators.fixed.integrate_fixed` steps, so that every backend takes the
same steps and returns the same numbers. Here it is laid out for a `Setup`: depth
indices (``record``, ``record_initial``, the rows of ``depth_theta``) in the *user's*
order of ``depths``, so that kernels write their outputs where the result keeps them,
without a reordering copy, and ``theta`` and ``d theta / d w`` evaluated once per stage,
in Python, so that no kernel calls back into Python.
"""

from __future__ import annotations

from .._core.setup.arguments import Setup
from .._core.integrators.schedule import Schedule, control_tables, fixed_schedule

__all__ = ["Schedule", "build_schedule", "check_scope"]


def build_schedule(setup: Setup, method: str, step: float | None,
                   max_steps: int | None = None) -> Schedule:
    """The steps `integrate_fixed` takes for this setup, with the control's tables; at
    most ``max_steps`` of them (None: all; see `Schedule.exhausted`)."""
    sched = fixed_schedule(setup.q, setup.depths, setup.control.breakpoints, setup.piece_of,
                           method, step, max_steps)
    return control_tables(sched, setup.control, setup.depths)


def check_scope(backend: str, closure: str, order: int, method: str) -> None:
    """What the accelerated backends run: jet of order 1 (with its estimate) and the
    stencil; anything else raises a ValueError pointing to ``backend='numpy'``."""
    if closure not in ("jet", "stencil"):
        raise ValueError(f"backend={backend!r} runs closure='jet' and closure='stencil', but "
                         f"got closure={closure!r}; use backend='numpy' for it")
    if closure == "jet" and order != 1:
        raise ValueError(f"backend={backend!r} runs the jet of order 1 (with its order-2 error "
                         f"estimate), but got order={order}; use backend='numpy' for higher "
                         f"orders")
    if closure == "stencil" and method == "disc":
        raise ValueError("closure 'stencil' does not implement the paper's discrete recursion "
                         "(method='disc'); use closure='jet' or 'crop'")
