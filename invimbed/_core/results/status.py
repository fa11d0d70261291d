"""The one status vocabulary of the solvers, and the per-row codes of the integrators.

`Status` is what a result's ``status`` holds, the one public status vocabulary
(``Status(code).message`` says what a code means; each result family lists the codes it
returns in its ``STATUS_CODES``, docs/results-and-status.md). `RowCode` is the per-row (or
per-input) code of the ensemble integrator, the compiled kernels and `invimbed.simulate`:
plain integers inside the kernels (numba), defined here once, and turned into a `Status`
by `row_status` only.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import numpy as np


class Status(IntEnum):
    """The status of a solver's result (``result.status``).

    Negative: ``success`` is False, and the fields are still returned (NaN where
    nothing could be computed). ``message`` says what the code means; the result's own
    ``message`` says where it happened.
    """

    #: Every requested depth was reached and is within the tolerance.
    SUCCESS = 0
    #: Every requested depth was reached, but nothing was checked against a tolerance.
    UNCHECKED = 1
    #: The integration failed: a non-finite value, a step-size underflow, the budget.
    FAILED = -1
    #: The result's own check against the tolerance fails: the error estimate at some
    #: depth, or an optimiser's optimality check.
    NOT_CONVERGED = -2
    #: The solve raised an exception instead of returning a result.
    RAISED = -3
    #: The user's callback stopped an optimiser.
    STOPPED = -4
    #: A function of the problem returns less than float64, and ``rtol`` asks for more
    #: than its precision: the fields are as precise as that function, not as ``rtol``.
    IMPRECISE = -5

    @property
    def message(self) -> str:
        """What the status means, and where to look next."""
        return _MESSAGES[self]

    @property
    def success(self) -> bool:
        """The ``success`` of a result with this status (``status >= 0``)."""
        return self >= 0


_MESSAGES = {
    Status.SUCCESS: "success: every requested depth was reached and is within the tolerance",
    Status.UNCHECKED:
        "reached, not checked: every requested depth was reached with finite values, but "
        "the result has no error estimate (closure='stencil' or 'crop', method='disc', "
        "estimate_error=False), so the fields were not checked against a tolerance",
    Status.FAILED: "integration failed: a non-finite value, a step-size underflow or the "
                   "step budget (the message names the depth; for an optimiser, the point "
                   "or the shooting interval whose solve failed)",
    Status.NOT_CONVERGED:
        "not converged: the error estimate exceeds the tolerance at some depth (the "
        "message names the first); the fields there are approximate. For an optimiser "
        "(optimize_control, solve_ocp, fit_endpoint_dynamics): it stopped at a point that "
        "fails the optimality check (solve_ocp: our KKT check at `tol`, `constraint_tol`; "
        "the others: scipy's convergence test, e.g. at the iteration limit); "
        "`solver_status` holds the optimiser's own code",
    Status.RAISED:
        "raised: the solve raised an exception instead of returning a result "
        "(invimbed.dask.solve_batch: a chunk whose task raised; its rows are NaN and the "
        "message names the exception)",
    Status.STOPPED:
        "stopped: the user's callback asked an optimiser to stop (optimize_control, "
        "solve_ocp, fit_endpoint_dynamics); the result holds the last iterate, not "
        "checked for optimality",
    Status.IMPRECISE:
        "imprecise: a function of the problem returns less than float64 and rtol asks for "
        "more than its precision: the fields are as precise as that function, not as rtol "
        "(the message names the function and the finest rtol it allows; the `low_precision` "
        "warning its dtype)",
}

def status_table() -> dict[int, str]:
    """``{code: message}`` of every `Status`, in the style of scipy's ``MESSAGES``: the
    value of the deprecated alias ``invimbed.STATUS``."""
    return {int(s): s.message for s in Status}


#: What to use instead of each deprecated alias of `Status`.
INSTEAD = {"STATUS": "invimbed.Status (Status(code).message says what a code means)",
           "OCP_STATUS": "invimbed.Status, and invimbed.OCPResult.STATUS_CODES for the "
                         "codes of solve_ocp"}


def deprecated_alias(name: str, value: Any) -> Any:
    """``value``, the deprecated alias ``name`` (``"STATUS"``, ``"OCP_STATUS"``) of
    `Status`, with a DeprecationWarning saying what to use instead (`INSTEAD`); for a
    module's ``__getattr__``."""
    import warnings

    warnings.warn(f"{name} is deprecated: use {INSTEAD[name]}", DeprecationWarning,
                  stacklevel=3)
    return value


class RowCode(IntEnum):
    """The code of one row (one (depth, input) pair, or one input) of an integrator.

    The compiled kernels hold these as plain integers (``int(RowCode.DONE)``...);
    `row_status` is the one place where they become a `Status`.
    """

    #: The row reached its end.
    DONE = 0
    #: The step size fell below the spacing of floating-point numbers.
    UNDERFLOW = 1
    #: A non-finite value of the dynamics or the running loss.
    NONFINITE = 2
    #: More steps than ``max_steps``.
    MAX_STEPS = 3
    #: Still integrating (inside the integrator only).
    RUNNING = 4
    #: Not finite at the very first evaluation (the compiled sweep).
    FIRST = 5
    #: The step size fell below the user's ``min_step`` (the compiled sweep).
    MIN_STEP = 6


def row_status(codes: Any) -> Status:
    """The `Status` of a result whose rows end with the `RowCode` s ``codes``: `SUCCESS`
    where every row is `RowCode.DONE`, `FAILED` otherwise."""
    return Status.SUCCESS if np.all(np.asarray(codes) == RowCode.DONE) else Status.FAILED


def as_status(code: Any) -> Status:
    """``code`` (an int of `STATUS`) as a `Status`; a ValueError naming it otherwise."""
    try:
        return Status(int(code))
    except (TypeError, ValueError):
        raise ValueError(f"`status` must be one of {sorted(int(s) for s in Status)} "
                         f"(invimbed.Status), got {code!r}.") from None


def __getattr__(name: str) -> Any:
    if name == "STATUS":
        return deprecated_alias(name, status_table())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RowCode", "Status", "as_status", "deprecated_alias", "row_status",
           "status_table"]
