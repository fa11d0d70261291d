"""Result objects, in the style of scipy's ``OdeResult``: the base `Result` and the sweep
family (`ImbeddingResult`, `FeedbackResult`), built from a `Draft` once
(docs/results-and-status.md)."""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass
from typing import Any

from scipy.optimize import OptimizeResult

from .status import Status, deprecated_alias, status_table

#: The `Status` code of a solve that raised (a chunk of `invimbed.dask.solve_batch`).
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
#: Keys of a sweep's draft only (`invimbed._core.sweep.orders` takes them off before the
#: result is built).
PRIVATE_FIELDS = ("_bound", "_more", "_top", "_nsteps")
#: Every field an `ImbeddingResult` may hold.
FIELDS = frozenset(COMMON_FIELDS + OPTIONAL_FIELDS + PRIVATE_FIELDS)
#: The fields of every result, of every solver (`Result`).
BASE_FIELDS = ("status", "message", "warnings", "success")


def _check_fields(keys: Any, declared: frozenset | None = FIELDS,
                  name: str = "ImbeddingResult") -> None:
    """Refuse the names of ``keys`` that ``declared`` (None: any) does not hold."""
    undeclared = [] if declared is None else sorted(set(keys) - declared)
    if undeclared:
        public = sorted(k for k in declared if not k.startswith("_"))
        raise TypeError(f"{name} has no field {', '.join(map(repr, undeclared))}; its "
                        f"fields are {', '.join(public)}")


#: The value that makes `Draft.but` take a field off.
DROP = object()


class Draft(dict):
    """The fields of a sweep's result while its stages compute them.

    A plain dict with attribute reading (``draft.z``), never returned to the user: each
    stage (the assembly, the order loop, the fallback, the closed-loop check, the dense
    output) returns a new draft with its pieces (`but`), and the solver builds its result
    from the last one, once (`sweep_result`, `feedback_result`). A draft is not changed in
    place (setting a key raises); the arrays it holds are the stages' own.
    """

    __slots__ = ()

    def __init__(self, *args: Any, **fields: Any) -> None:
        fields = dict(*args, **fields)
        _check_fields(fields)
        dict.__init__(self, fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError("a Draft is not changed in place: take draft.but(key=value)")

    __setattr__ = __setitem__

    def but(self, **changes: Any) -> "Draft":
        """A new draft with the fields ``changes`` (a value `DROP` takes the field off)."""
        _check_fields(changes)
        fields = {k: v for k, v in self.items() if changes.get(k, None) is not DROP}
        fields.update((k, v) for k, v in changes.items() if v is not DROP)
        return Draft(fields)


def _deprecated_set(result: dict, key: str) -> None:
    name = type(result).__name__
    warnings.warn(f"setting a field of {'an' if name[0] in 'AEIOU' else 'a'} {name} "
                  f"({key!r}) is deprecated: a result is built once by its solver; copy it "
                  f"into a dict of your own to change it", DeprecationWarning, stacklevel=3)


def _missing_field(result: "Result", name: str) -> str:
    """The message of the AttributeError of ``result.name`` where the result has no such
    field: what gives it (``sol``: ``dense_output=True``), else the fields it has."""
    if name == "sol":
        return ("this result has no `sol`: the continuous extension is kept only with "
                "dense_output=True; solve again with solve_imbedding(..., "
                "dense_output=True) (or solve_optimal(..., dense_output=True)) and call "
                "res.sol(p)")
    if name.startswith("_"):      # copy, pickle, IPython probing: the bare name, as scipy
        return name
    declared = type(result)._fields
    if declared is not None and name in declared:
        head = f"this result has no field {name!r}"
    else:
        close = difflib.get_close_matches(name, sorted(result), n=1)
        head = (f"{type(result).__name__} has no field {name!r}"
                + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"{head}; its fields are {', '.join(sorted(result))}"


def _shown(value: Any, width: int) -> str:
    """One field's text in a result's repr: arrays abridged, nested results by shape."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=6, threshold=12, edgeitems=2,
                               prefix=" " * (width + 2))
    if isinstance(value, OptimizeResult):
        return "{" + ", ".join(f"{k}: array{getattr(v, 'shape', '')}"
                               for k, v in value.items()) + "}"
    return repr(value)


class Result(OptimizeResult):
    """The base of every solver's result, in the style of scipy's ``OptimizeResult``.

    A dict with attribute access (``res.status`` is ``res["status"]``) and a readable
    repr. Each solver family has its subclass (`ImbeddingResult`, `FeedbackResult`,
    `OCPResult`, `ControlResult`, `FitResult`), built once by its solver, in one place;
    setting a field afterwards is deprecated (a DeprecationWarning), and a field the
    class does not declare is refused with a TypeError (docs/results-and-status.md).

    Attributes
    ----------
    status : Status
        The one status vocabulary of the package (`invimbed.Status`); the codes each
        family returns are its ``STATUS_CODES`` (docs/results-and-status.md).
    message : str
        What happened, and where; warnings are not repeated here.
    warnings : list
        Structured warnings (`SolverWarning`; `optimize_control`: its notes as text).
    success : bool
        ``status >= 0``: the answer is within the user's tolerance (or, status 1, reached
        but not checked against one).
    """

    #: The fields a result of the class may hold (None: any, as a scipy result).
    _fields: frozenset | None = None
    #: The fields shown first by the repr, in this order.
    _first: tuple[str, ...] = ("message", "success", "status")
    #: ``{Status: what it means for this family}``: the codes its solver returns.
    STATUS_CODES: dict = {}

    def __init__(self, *args: Any, **fields: Any) -> None:
        fields = dict(*args, **fields)
        _check_fields(fields, type(self)._fields, type(self).__name__)
        dict.__init__(self, fields)

    def __setitem__(self, key: str, value: Any) -> None:
        _check_fields((key,), type(self)._fields, type(self).__name__)
        _deprecated_set(self, key)
        dict.__setitem__(self, key, value)

    __setattr__ = __setitem__

    def update(self, *args: Any, **fields: Any) -> None:
        fields = dict(*args, **fields)
        _check_fields(fields, type(self)._fields, type(self).__name__)
        for key in fields:
            _deprecated_set(self, key)
        dict.update(self, fields)

    def setdefault(self, key: str, default: Any = None) -> Any:
        _check_fields((key,), type(self)._fields, type(self).__name__)
        if key not in self:
            _deprecated_set(self, key)
        return dict.setdefault(self, key, default)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(_missing_field(self, name)) from None

    def __reduce__(self) -> tuple:
        return type(self), (dict(self),)

    def __repr__(self) -> str:
        if not self:
            return f"{type(self).__name__}()"
        keys = [k for k in self._first if k in self] + [k for k in self if k not in self._first]
        width = max(map(len, keys)) + 1
        return "\n".join(f"{k.rjust(width)}: {_shown(self[k], width)}" for k in keys)

    __str__ = __repr__


class ImbeddingResult(Result):
    """The fields of every requested depth, from `solve_imbedding` or
    `solve_adjoint`.

    A `Result` (attribute and key access, ``res.z`` is ``res["z"]``) whose fields are
    declared (`COMMON_FIELDS`, in every result, and `OPTIONAL_FIELDS`): an undeclared
    field is refused with a TypeError, at construction and later. A solver builds its
    result once, from the `Draft` its stages returned (`sweep_result`); setting a field
    afterwards is deprecated.
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
    status : Status
        One of `STATUS_CODES` (docs/results-and-status.md): 0 success; 1 reached but not
        checked (no error estimate: ``closure="stencil"`` or ``"crop"``, ``method="disc"``,
        ``estimate_error=False``); -1 integration failure; -2 not converged (the error
        estimate exceeds the tolerance); -3 (`invimbed.dask.solve_batch` only) a chunk
        raised an exception; -5 a function of the problem is less precise than ``rtol``
        asks. See ``message``.
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

    _fields = FIELDS
    _first = ("message", "success", "status", "closure", "method", "nfev", "depths", "z",
              "value", "adjoint", "param_grad", "depth_grad", "error_estimate")
    STATUS_CODES = {
        Status.SUCCESS: "every requested depth was reached and is within the tolerance",
        Status.UNCHECKED: "every requested depth was reached, with no error estimate to "
                          "check (closure='stencil' or 'crop', method='disc', "
                          "estimate_error=False)",
        Status.FAILED: "the integration failed (the message names the depth)",
        Status.NOT_CONVERGED: "the error estimate exceeds the tolerance at some depth",
        Status.RAISED: "invimbed.dask.solve_batch: a chunk raised an exception",
        Status.IMPRECISE: "a function of the problem is less precise than rtol asks",
    }


class FeedbackResult(ImbeddingResult):
    """The result of `solve_optimal`: an `ImbeddingResult` (the sweep's fields of every
    depth) with the optimal feedback's fields.

    Attributes
    ----------
    feedback, feedback_jacobian, policy, closed_loop_value, linear_quadratic,
    optimality_error
        As `solve_optimal` documents them.
    warnings : list of SolverWarning
        As `ImbeddingResult`'s, and ``"closed_loop_mismatch"`` (the closed-loop check
        refused the value), ``"branch_switch"`` (with ``control_bounds``: the optimal path
        switches between branches of the Hamiltonian, which the jet cannot see),
        ``"newton_at_derivative_noise"``.
    """

    STATUS_CODES = {
        Status.SUCCESS: "every requested depth was reached, within the tolerance, and the "
                        "closed-loop check (where it ran) agrees",
        Status.FAILED: "the sweep failed: an integration, the feedback's Newton solve, or "
                       "the time budget `max_time` (the message names the depth)",
        Status.NOT_CONVERGED: "the error estimate exceeds the tolerance, or the closed-loop "
                              "check refused the value (warning 'closed_loop_mismatch')",
        Status.IMPRECISE: "a function of the problem is less precise than rtol asks",
    }


def _built(cls: type, draft: Any) -> ImbeddingResult:
    fields = {k: v for k, v in draft.items() if k not in PRIVATE_FIELDS}
    est = fields.get("error_estimate")
    if est is not None:
        fields["error_estimate"] = ImbeddingResult(est)
    return cls(fields)


def sweep_result(draft: Any) -> ImbeddingResult:
    """The `ImbeddingResult` of a sweep's last `Draft` (`solve_imbedding`, `solve_adjoint`,
    `invimbed.dask.solve_batch`, `DenseSolution`): the one place it is built."""
    return _built(ImbeddingResult, draft)


def feedback_result(draft: Any) -> FeedbackResult:
    """The `FeedbackResult` of `solve_optimal`'s last `Draft` (and of its `DenseSolution`):
    the one place it is built."""
    return _built(FeedbackResult, draft)


def __getattr__(name: str) -> Any:
    if name == "STATUS":
        return deprecated_alias(name, status_table())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
