"""Result objects, in the style of scipy's ``OdeResult``."""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass
from typing import Any

from scipy.optimize import OptimizeResult

from .status import STATUS, Status

#: ``{code: message}`` of every solver's ``result.status`` (`Status`), in the style of
#: scipy's ``MESSAGES``; see `invimbed._core.results.status`.
STATUS = STATUS
#: The `STATUS` code of a solve that raised (a chunk of `invimbed.dask.solve_batch`).
RAISED = Status.RAISED


@dataclass(frozen=True)
class SolverWarning:
    """One entry of a result's ``warnings`` list.

    Attributes
    ----------
    code : str
        What kind of warning, e.g. ``"ran_per_depth"``, ``"estimate_large"``,
        ``"finite_differences_at_tolerance"``, ``"fallback_adjoint"``.
    message : str
        What happened and what to do about it.
    depth : float or None
        The depth it concerns, if one.
    """

    code: str
    message: str
    depth: float | None = None

    def __str__(self) -> str:
        return self.message


#: The fields of every result of `solve_imbedding`, `solve_adjoint`, `solve_optimal` and
#: `invimbed.dask.solve_batch`.
COMMON_FIELDS = ("depths", "z", "value", "adjoint", "depth_grad", "success", "status",
                 "message", "nfev", "error_estimate", "closure", "method", "derivatives",
                 "warnings")
#: The fields some solvers add (see `ImbeddingResult`).
OPTIONAL_FIELDS = (
    "param_grad",                                                        # not solve_optimal
    "converged", "series_ratio", "order", "orders_run", "depth_order", "exact_fallback",
    "sol",                                                               # solve_imbedding
    "nsteps", "strategy",                                                # solve_adjoint
    "backend",                                       # backend="numba" or "cupy" (its name)
    "chunk_status",                                                      # solve_batch
    "feedback", "feedback_jacobian", "policy", "closed_loop_value",      # solve_optimal
    "linear_quadratic", "optimality_error",
)
#: Fields of the assembly only (`invimbed._core.sweep.orders` takes them off with `set_fields`).
PRIVATE_FIELDS = ("_bound", "_more", "_nsteps")
#: Every field an `ImbeddingResult` may hold.
FIELDS = frozenset(COMMON_FIELDS + OPTIONAL_FIELDS + PRIVATE_FIELDS)


def _check_fields(keys: Any) -> None:
    undeclared = sorted(set(keys) - FIELDS)
    if undeclared:
        raise TypeError(f"ImbeddingResult has no field {', '.join(map(repr, undeclared))}; its "
                        f"fields are {', '.join(sorted(COMMON_FIELDS + OPTIONAL_FIELDS))}")


def set_fields(result: "ImbeddingResult", **changes: Any) -> "ImbeddingResult":
    """Set the fields ``changes`` of ``result`` (in place; returns it); a value `DROP`
    takes the field off.

    The one way a later stage of a solver (the order loop, the fallback, the closed-loop
    check, the dense output) changes a result that its builder
    (`invimbed._core.sweep.assembly.pack_result`, `invimbed.dask.solve_batch`) made: setting a
    field directly (``res.x = ...``, ``res["x"] = ...``) is deprecated, and an undeclared
    field is refused."""
    _check_fields(changes)
    for key, value in changes.items():
        if value is DROP:
            dict.pop(result, key, None)
        else:
            dict.__setitem__(result, key, value)
    return result


#: The value that makes `set_fields` take a field off.
DROP = object()


def _deprecated_set(key: str) -> None:
    warnings.warn(f"setting a field of an ImbeddingResult ({key!r}) is deprecated: a result "
                  f"is built once by its solver; copy it into a dict of your own to change it",
                  DeprecationWarning, stacklevel=3)


def _missing_field(result: dict, name: str) -> str:
    """The message of the AttributeError of ``result.name`` where the result has no such
    field: what gives it (``sol``: ``dense_output=True``), else the fields it has."""
    if name == "sol":
        return ("this result has no `sol`: the continuous extension is kept only with "
                "dense_output=True; solve again with solve_imbedding(..., "
                "dense_output=True) (or solve_optimal(..., dense_output=True)) and call "
                "res.sol(p)")
    if name.startswith("_"):      # copy, pickle, IPython probing: the bare name, as scipy
        return name
    if name in FIELDS:
        head = f"this result has no field {name!r}"
    else:
        close = difflib.get_close_matches(name, sorted(result), n=1)
        head = (f"ImbeddingResult has no field {name!r}"
                + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"{head}; its fields are {', '.join(sorted(result))}"


class ImbeddingResult(OptimizeResult):
    """The fields of every requested depth, from `solve_imbedding` or
    `solve_adjoint`.

    A dict with attribute access (``res.z`` is ``res["z"]``) whose fields are declared
    (`COMMON_FIELDS`, in every result, and `OPTIONAL_FIELDS`): an undeclared field is
    refused with a TypeError, at construction and later. A solver builds its result once
    (`invimbed._core.sweep.assembly.pack_result`); a later stage changes it through `set_fields`
    (setting a field directly is deprecated).
    Arrays follow the order in which the depths were given; a batched input ``x`` of
    shape (B, N) adds a batch axis after the depth axis. `solve_adjoint` adds ``nsteps``
    and ``strategy``, an accelerated backend ``backend`` (its name),
    `invimbed.dask.solve_batch` ``chunk_status``, and `solve_optimal` the fields it
    documents (``feedback``, ``policy``, ...).

    Attributes
    ----------
    depths : ndarray, shape (n,)
        The requested depths ``p_i``.
    z : ndarray, shape (n, N) or (n, B, N)
        ``Z(p_i, x) = z(q; p_i, x)``, the output of the depth-``p_i`` network
        (eq. (2)).
    value : ndarray, shape (n,) or (n, B)
        ``V(p_i, x) = J(theta; p_i, x)``, the loss (eq. (4)).
    adjoint : ndarray, shape (n, N) or (n, B, N)
        ``Lam(p_i, x) = grad_x J``, the imbedded adjoint (eq. (9), Theorem 2).
    param_grad : ndarray, shape (n, n_w) or (n, B, n_w)
        ``dJ/dw``, the gradient in the control parameters (eq. (32)).
    depth_grad : ndarray, shape (n,) or (n, B)
        ``dJ/dp = -(Lam . Phi + R)`` at ``(p_i, x)`` (docs/theory.md, "The imbedded fields"). At a jump of a
        piecewise-constant control it is the derivative from above (``p -> p_i+``).
    success : bool
        ``status >= 0``: every requested depth was reached with finite values and, where
        the result has an error estimate (status 0), is within the tolerance (``tol``, or
        10% of ``max(1, |field|)`` without it) or was recomputed exactly (``fallback``).
        A result without an estimate (status 1) was not checked against any tolerance.
    status : int
        One of `STATUS`: 0 success; 1 reached but not checked (no error estimate:
        ``closure="stencil"`` or ``"crop"``, ``method="disc"``, ``estimate_error=False``);
        -1 integration failure; -2 not converged (the error estimate exceeds the
        tolerance); -3 (`invimbed.dask.solve_batch` only) a chunk raised an exception.
        See ``message``.
    message : str
        Human-readable description; on failure it names the depth where it happened.
    nfev : int
        Number of right-hand-side evaluations (of the whole batch).
    error_estimate : OptimizeResult or None
        Where the closure has one (``closure="jet"`` with ``estimate_error=True``):
        estimated absolute errors of ``z``, ``value``, ``adjoint``, ``param_grad`` (same
        shapes), from the difference with the jet one order higher, and of
        ``depth_grad``, ``sum_i |f_i(p, x)|`` times the adjoint's (`solve_imbedding`).
    closure, method : str
        What produced the result.
    derivatives : str
        Where the derivatives came from (`invimbed.BolzaProblem.derivative_source`):
        ``"exact: ..."`` (traced functions, `invimbed.from_sympy`, a provider),
        ``"user: ..."`` (derivative callables, the rest by finite differences) or
        ``"finite differences (...)"`` with the reason (docs/derivatives.md).
    warnings : list of SolverWarning
        Structured warnings (codes ``"estimate_large"``, ``"series_not_converging"``,
        ``"fallback_adjoint"``, ``"finite_differences_at_tolerance"``, ``"order_limit"``,
        ``"higher_order_failed"``, ``"sweep_failed"``, ``"ran_per_depth"``,
        ``"scalar_time"``: a vectorised function of the problem takes a scalar ``t`` only
        and ran once per distinct time, see `invimbed.BolzaProblem`, ...); ``message``
        summarises.
    converged : ndarray of bool, shape (n,) or (n, B), or None
        `solve_imbedding` with an error estimate: whether each (depth, input) is within
        the tolerance (and, with ``tol``, passed the ratio test).
    order : int or None
        `solve_imbedding`: the jet order used; with ``tol``, the highest order among the
        fields returned (``depth_order`` says which order each pair's fields are of).
    orders_run : list of int or None
        `solve_imbedding` with ``tol``: the jet orders swept, in turn (docs/accuracy.md,
        "How the sweep picks the jet order").
    depth_order : ndarray of int, shape (n,) or (n, B), or None
        `solve_imbedding` with ``tol``: the jet order each (depth, input) pair's fields
        are of (the order that converged it, or the highest that reached it).
    exact_fallback : ndarray of bool or None
        `solve_imbedding` with ``fallback="adjoint"``: the (depth, input) pairs whose
        fields are the exact values of `solve_adjoint`.
    series_ratio : ndarray or None
        `solve_imbedding` with ``tol``: the largest ratio of successive differences of
        the jet series (the ratio test refuses above 0.8).
    sol : DenseSolution or None
        With ``dense_output=True`` (`solve_imbedding`, `solve_optimal`): ``sol(p)`` gives
        every field at any depth ``p`` of the swept interval, from the continuous
        extension of the accepted steps (docs/accuracy.md, "Dense output: any depth from
        one sweep"); None where the sweep took no step. Absent without it.
    """

    def __init__(self, *args: Any, **fields: Any) -> None:
        fields = dict(*args, **fields)
        _check_fields(fields)
        dict.__init__(self, fields)

    def __setitem__(self, key: str, value: Any) -> None:
        _check_fields((key,))
        _deprecated_set(key)
        dict.__setitem__(self, key, value)

    __setattr__ = __setitem__

    def update(self, *args: Any, **fields: Any) -> None:
        fields = dict(*args, **fields)
        _check_fields(fields)
        for key in fields:
            _deprecated_set(key)
        dict.update(self, fields)

    def setdefault(self, key: str, default: Any = None) -> Any:
        _check_fields((key,))
        if key not in self:
            _deprecated_set(key)
        return dict.setdefault(self, key, default)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(_missing_field(self, name)) from None

    def __reduce__(self) -> tuple:
        return type(self), (dict(self),)

    def __repr__(self) -> str:
        order = ["message", "success", "status", "closure", "method", "nfev", "depths", "z",
                 "value", "adjoint", "param_grad", "depth_grad", "error_estimate"]
        keys = [k for k in order if k in self] + [k for k in self if k not in order]
        width = max(map(len, keys)) + 1
        import numpy as np

        lines = []
        for k in keys:
            v = self[k]
            if isinstance(v, np.ndarray):
                text = np.array2string(v, precision=6, threshold=12, edgeitems=2,
                                       prefix=" " * (width + 2))
            elif isinstance(v, OptimizeResult):
                text = "{" + ", ".join(f"{kk}: array{getattr(vv, 'shape', '')}"
                                       for kk, vv in v.items()) + "}"
            else:
                text = repr(v)
            lines.append(f"{k.rjust(width)}: {text}")
        return "\n".join(lines)

    __str__ = __repr__
