"""The imbedding sweep: every depth in one pass (the paper's Algorithm 1)."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import numpy as np

from ..closures import JetClosure, StencilClosure
from ..derivatives import DerivativeOrderError
from ..derivatives.symbolic import SympyProvider
from ..derivatives.traced import CompletedProvider
from .fallback import exact_options, exact_probe, fallback_adjoint
from ..integrators import SCIPY_METHODS, integrate
from ..problem.bolza import BolzaProblem
from ..results.results import Draft, ImbeddingResult, SolverWarning, sweep_result
from ..results.status import Status
from ..runtime.backends import check_backend, get_backend
from .accuracy import assess, safety_factor
from ..setup.arguments import prepare
from ..setup.settings import Accuracy, Closure, Integrator, closure_keywords, settle
from .orders import raise_order
from ..inputs.probe import precision_limit
from .assembly import collect_results, mark_imprecise
from ..reference.row_chunks import resolve_budget
from .memory import plan as memory_plan
from ..derivatives.finite_difference import relative_step
from .dense import (attach_closure_dense, check_dense_output, dense_conflicts,
                    dense_tolerances)
from ..inputs.validation import STEP_BUDGET, as_ivp_options, as_spacing

def solve_imbedding(problem: BolzaProblem, x: Any, depths: Any, *, control: Any = None,
                    closure: str | Closure = "jet", order: int = 1, method: str = "RK45",
                    rtol: float | None = None, atol: float | None = None,
                    step: float | None = None, estimate_error: bool = True,
                    difference: str = "central", delta: Any = None, backend: str = "numpy",
                    tol: Any = None, fallback: str | None = None, max_order: int = 6,
                    ratio_test: bool = True, dense_output: bool = False,
                    memory_budget: int | str | None = None,
                    accuracy: Accuracy | None = None, integrator: Integrator | None = None,
                    **options: Any) -> ImbeddingResult:
    r"""Solve a Bolza problem for every requested depth in one sweep in ``p``.

    Integrates the imbedded fields (docs/theory.md, "The imbedded fields"): the output
    ``Z(p, x)`` (Theorem 1, eq. (6)), the loss ``V(p, x)``, the adjoint ``Lam = grad_x V``
    (Theorem 2, eq. (10)), the parameter gradient (eq. (32)) and the exact depth gradient,
    from ``p = q`` down to the deepest requested depth, with no pass in ``t``. Every
    argument in detail: docs/method.md, "`solve_imbedding` in detail".

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
        The input (the state at ``t = p``); a batch is solved vectorised.
    depths : array_like, shape (n,)
        Strictly monotone depths ``p_i <= q``, in any order; results follow it.
    control : Constant, PiecewiseConstant, Control or None
        The open-loop control ``theta(t; w)``; ``None`` means ``theta`` of size 0.
    closure : {"jet", "stencil", "crop"} or Closure, default "jet"
        How the nested Jacobians are closed (docs/theory.md, "The closures"); a
        `invimbed.Closure` gives ``order``, ``estimate_error``, ``difference`` and
        ``delta`` too.
    order : int, default 1
        Jet order ``K``; order 1 is exact for linear-quadratic problems.
    method : str, default "RK45"
        A scipy method, fixed-step ``"euler"``/``"midpoint"``/``"rk4"`` (with ``step``),
        or ``"disc"``, the paper's discrete architecture (eqs. (14), (15)).
    rtol, atol : float
        Tolerances of the adaptive methods.
    step : float, optional
        Largest step of the fixed-step methods (``max_step`` for scipy's).
    estimate_error : bool, default True
        Carry the jet of order ``K + 1`` and report the difference (``error_estimate``).
    difference, delta
        The stencil's difference quotient and spacing (``closure="stencil"``).
    backend : {"numpy", "numba", "cupy"}, default "numpy"
        Where the sweep runs (docs/performance.md).
    tol : float or (float, float), optional
        ``(rtol, atol)`` for every field; the jet order is raised up to ``max_order``
        where it pays, under a ratio test (docs/accuracy.md).
    fallback : {None, "adjoint"}
        Recompute what did not converge with the exact `solve_adjoint`.
    max_order : int, default 6
        With ``tol``: the highest jet order the sweep may raise ``order`` to; an
        ``order`` above it is refused (ValueError naming both). Without ``tol`` the order
        is ``order`` and ``max_order`` is not used.
    ratio_test : bool, default True
        Refuse depths whose jet series does not visibly converge, with ``tol`` and without
        it (the 10% rule); carries the jets of orders ``K - 1`` and ``K + 2``
        (docs/accuracy.md, "The estimate, and when it is refused").
    dense_output : bool, default False
        Keep the continuous extension: ``res.sol(p)`` gives every field at any depth of
        ``[min(depths), q]`` (docs/accuracy.md, "Dense output: any depth from one sweep").
        The integrator then runs at ``rtol`` and ``atol`` divided by a factor of the
        method (10 for RK45, 30 for RK23; docs/accuracy.md), so that the fields at any
        depth are within the requested ``rtol`` and ``atol``.
    memory_budget : int, str or None
        Bytes (or ``"2GiB"``) the sweep may hold (docs/performance.md, "Memory budget").
    accuracy : Accuracy, optional
        ``tol``, ``rtol``, ``atol``, ``max_order``, ``ratio_test`` and ``fallback`` as one
        object (docs/method.md, "Settings as objects").
    integrator : Integrator, optional
        ``method``, ``step`` and the ``**options`` as one object. A keyword left at its
        default defers to the object; one that sets a field the object sets differently
        is a ValueError naming both.
    **options
        ``max_steps``, ``first_step``, ``max_step``, ``min_step``; others raise TypeError.

    Returns
    -------
    ImbeddingResult
        The fields of every depth, ``success``, ``status`` (`invimbed.Status`: 0 within
        the tolerance, 1 reached but unchecked, -1 failed, -2 not converged), ``message``,
        ``error_estimate``, ``converged``, ``order`` and ``warnings``.

    Raises
    ------
    TypeError, ValueError
        For an invalid argument, naming it, what was expected and what came.
    MemoryError
        If the outputs and the sweep's state exceed ``memory_budget``.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> problem = invimbed.BolzaProblem(lambda t, z, th: -z + th,
    ...                                 terminal_loss=lambda z: 0.5 * z @ z)
    >>> res = invimbed.solve_imbedding(problem, [1.0], [-1.0, -0.5],
    ...                                control=invimbed.Constant([0.5]))
    >>> bool(res.success), res.z.shape, res.param_grad.shape
    (True, (2, 1), (2, 1))
    """
    options = as_ivp_options(options, "solve_imbedding", suggest=_NAMED)
    closure_set = settle(Closure, *closure_keywords(
        closure, order=(order, 1), estimate_error=(estimate_error, True),
        difference=(difference, "central"), delta=(delta, None)), argument="closure")
    accuracy = settle(Accuracy, accuracy, {
        "tol": (tol, None), "rtol": (rtol, None), "atol": (atol, None),
        "max_order": (max_order, 6), "ratio_test": (ratio_test, True),
        "fallback": (fallback, None)}, argument="accuracy")
    integrator = settle(Integrator, integrator, {
        "method": (method, "RK45"), "step": (step, None),
        **{k: (v, None) for k, v in options.items()}}, argument="integrator")
    closure, order = closure_set.kind, closure_set.order
    estimate_error = closure_set.estimate_error
    method, step, options = integrator.method, integrator.step, integrator.options
    if accuracy.checked and order > accuracy.max_order:
        max_order = accuracy.max_order
        raise ValueError(
            f"`order` ({order}) is above `max_order` ({max_order}): with `tol` the sweep "
            f"starts at `order` and raises it up to `max_order`, so the start cannot be above "
            f"the ceiling; pass max_order={order} (or more) to allow order {order}, or an "
            f"order of at most {max_order}")
    if check_dense_output(dense_output, **dense_conflicts(method, backend, accuracy.tol,
                                                          accuracy.fallback)):
        options["dense_output"] = True
    budget = resolve_budget(memory_budget)
    device = None    # backend="cupy": device arrays in, device arrays out (docs/performance.md);
    if backend == "cupy":   # the sweep's result is judged on the host, then moved back
        from ..runtime.namespace import array_namespace, is_cupy_array, to_numpy

        if is_cupy_array(x):
            device, x = array_namespace(x), to_numpy(x)
    setup = prepare(problem, x, depths, control, integrator=integrator,
                    accuracy=integrator_tolerances(accuracy), closure=closure_set)
    accuracy = setup.accuracy
    rtol, atol = accuracy.rtol, accuracy.atol
    if dense_output:    # sol(p) within the requested tolerance (docs/accuracy.md); the
        rtol, atol = dense_tolerances(method, rtol, atol)   # precision check saw the user's
    delta = as_spacing(closure_set.delta, setup.x.shape)
    est = bool(estimate_error) and closure == "jet" and method != "disc"
    if accuracy.checked and not est:
        raise ValueError(
            f"`tol` needs the jet's error estimate (closure='jet', estimate_error=True, a "
            f"method other than 'disc'), but got closure={closure!r}, "
            f"estimate_error={estimate_error!r}, method={method!r}; drop `tol`, or use "
            f"solve_adjoint for exact values")
    if backend != "numpy":
        check_backend(backend, "sweep")
        if accuracy.checked and accuracy.ratio_test and not _compiled_adaptive(backend, method):
            raise ValueError(
                f"`tol` with backend={backend!r}: the accelerated backends carry the jets of "
                f"orders 1 and 2 only, so the ratio test that keeps the estimate honest "
                f"cannot run; use backend='numpy' (or, on numba, method='RK45' or 'RK23', "
                f"which carry them), or pass ratio_test=False to accept the bare estimate")
    prov = setup.provider
    warnings: list[SolverWarning] = []
    if method in SCIPY_METHODS:
        rtol, atol = _finite_difference_floor(prov, closure, order, est, setup, rtol, atol,
                                              warnings)

    def sweep(at: Any, K: int, steps: int | None = None, held: int = 0) -> Draft:
        opts = dict(options)
        if steps is not None and method in SCIPY_METHODS and backend == "numpy":
            opts["raise_budget"] = steps      # a raised order (`raise_order`)
        return _sweep(at, closure=closure, order=K, method=method, rtol=rtol, atol=atol,
                      step=step, est=est, difference=closure_set.difference, delta=delta,
                      backend=backend, accuracy=accuracy, warnings=list(warnings),
                      options=opts, budget=budget, held=held)

    fallback, max_order = accuracy.fallback, accuracy.max_order
    exact = (exact_options(method, replace(accuracy, rtol=rtol, atol=atol),
                           options.get(STEP_BUDGET),
                           finest=precision_limit(setup.problem.low_precision))
             if accuracy.checked or fallback == "adjoint" else None)
    if not accuracy.checked:
        res = sweep(setup, order)
    else:
        top = (_highest_order(prov, setup, est, max_order)
               if backend == "numpy" or _compiled_adaptive(backend, method) else order)
        res = raise_order(setup, sweep, order=order, top=max(top, order),
                          probe=exact_probe(setup, exact) if fallback == "adjoint" else None)
        last = (res.get("orders_run") or [order])[-1]
        if res.status == Status.NOT_CONVERGED and top < max_order and last >= top:
            why = (f"the {prov.name} serves jets up to order {top}" if backend == "numpy"
                   else f"backend={backend!r} does not raise the order")
            res = res.but(warnings=res.warnings + [SolverWarning(
                "order_limit", f"the sweep stopped at order {last} short of "
                f"max_order={max_order}: {why}")])
    res = res.but(order=res.get("order", order) if closure in ("jet", "crop") else None)
    if fallback == "adjoint" and res.get("converged") is not None:
        res = fallback_adjoint(setup, res, exact)
    res = mark_imprecise(setup, res)           # before: its message says what it is
    res = mark_unchecked(res, closure, est, method)
    keys = ("exact_fallback", "orders_run", "depth_order") + (("sol",) if dense_output else ())
    res = res.but(**{k: res.get(k) for k in keys})   # sol None: no step taken
    if device is not None:
        from ..runtime.namespace import fields_on

        res = fields_on(res, device)
    return sweep_result(res)


def mark_unchecked(res: Draft, closure: str, est: bool, method: str) -> Draft:
    """The draft ``res``, if successful without an error estimate, with status 1,
    "reached, not checked", and a message naming what left it without one
    (`invimbed.Status`)."""
    if res.status != Status.SUCCESS or res.get("converged") is not None:
        return res
    what = (f"closure={closure!r}" if closure != "jet" else
            "method='disc'" if method == "disc" else "estimate_error=False")
    return res.but(status=Status.UNCHECKED,
                   message=f"{res.message.rstrip('.')}; {what} has no error estimate, so the "
                           f"fields were not checked against a tolerance (status 1). Compare "
                           f"with solve_adjoint, or use closure='jet' with "
                           f"estimate_error=True.")


#: The named arguments of `solve_imbedding`, for the hint of a misspelt keyword.
_NAMED = tuple(inspect.signature(solve_imbedding).parameters)


def integrator_tolerances(accuracy: Accuracy) -> Accuracy:
    """``accuracy`` with the integrator's ``rtol``, ``atol`` filled in where it leaves
    them None: 1e-6 and 1e-9, tightened with ``tol`` to a hundredth of it (so that the
    closure error dominates what ``tol`` is compared with), but not below 1e-12 and
    1e-14."""
    if accuracy.checked:
        r, a = accuracy.derived((0.01,), (0.01, 1e-3), (1e-12, 1e-6), (1e-14, 1e-9))
    else:
        r, a = 1e-6, 1e-9
    return accuracy.with_tolerances(r, a)


def _fd_levels(prov: Any, closure: str, order: int, est: bool, nw: int) -> int:
    """Most nested finite-difference levels any derivative of the sweep needs."""
    if not hasattr(prov, "fd_levels"):
        return 0
    if closure == "stencil":
        reqs = [("f", 1, 0), ("R", 1, 0), ("T", 1, 0)] + ([("f", 0, 1), ("R", 0, 1)]
                                                         if nw else [])
    else:
        top = order + 1 + (1 if est else 0)
        reqs = [("f", top, 0), ("R", top, 0), ("T", top, 0)]
        if nw:
            reqs += [("f", top, 1), ("R", top, 1)]
    zero = getattr(prov, "zero", ())
    return max((prov.fd_levels(w, dz, dth) for w, dz, dth in reqs if w not in zero), default=0)


#: The finite-difference provider's step ``h = eps^(1/(2 + k))`` for ``k`` nested levels
#: leaves a relative error (truncation + rounding) of about ``eps^(2/(2 + k))``: the
#: right-hand side of the sweep is noisy at that level, and an adaptive integrator asked
#: for less chases the noise with ever smaller steps.
#: Below ``FD_CLAMP`` times `fd_floor` the integrator's ``rtol`` is raised to it (between
#: the two it only warns: the noise is far below the floor for smooth, nearly linear
#: functions, where differences are accurate).
FD_CLAMP = 1e-2


def fd_floor(levels: int) -> float:
    """The relative accuracy finite differences of ``levels`` nested levels can serve: the
    square of their relative step (truncation ``h^2`` balanced against rounding
    ``eps / h``)."""
    return 0.0 if levels <= 0 else float(relative_step(levels) ** 2)


def _finite_difference_floor(prov: Any, closure: str, order: int, est: bool, setup: Any,
                             rtol: float, atol: float, warnings: list) -> tuple[float, float]:
    levels = _fd_levels(prov, closure, order, est, setup.control.n_params)
    floor = fd_floor(levels)
    if floor and rtol < floor:
        clamp = FD_CLAMP * floor
        ran = ""
        if rtol < clamp:
            factor = clamp / rtol
            ran = (f"; the integrator ran at rtol={clamp:.2g}, atol={atol * factor:.2g} "
                   f"instead of chasing rounding noise with ever smaller steps")
            rtol, atol = clamp, atol * factor
        warnings.append(SolverWarning(
            "finite_differences_at_tolerance",
            f"rtol is below what the {prov.name}'s derivatives can serve ({levels} nested "
            f"difference levels: about {floor:.1g} relative){ran}. Give exact derivatives "
            f"(invimbed.from_sympy, or `derivatives=`) for tighter results"))
    tol = setup.accuracy.target
    if floor and tol is not None and min(t for t in tol if t > 0) < 10 * floor:
        warnings.append(SolverWarning(
            "finite_differences_at_tolerance",
            f"tol={tol} is near or below what the {prov.name}'s derivatives can serve (about "
            f"{floor:.1g} relative): the error estimate is not reliable there. Give exact "
            f"derivatives (invimbed.from_sympy, or `derivatives=`)"))
    return rtol, atol


def time_free(problem: Any, prov: Any) -> bool:
    """Whether f and R are known not to depend on t: declared (``autonomous=True``,
    checked by `BolzaProblem`), or the symbolic provider's expressions have no t (also
    the trace behind derivatives a problem gives, `CompletedProvider.time_free`)."""
    if getattr(problem, "autonomous", False):
        return True
    return isinstance(prov, (SympyProvider, CompletedProvider)) and prov.time_free()


def _serves(prov: Any, K: int, est: bool, nw: int) -> bool:
    """Whether the provider serves a jet of order ``K`` carried alongside (derivatives of
    order ``K + 1``, plus one with control parameters)."""
    if not est:
        return False
    if prov.max_jet_order is not None and K > prov.max_jet_order:
        return False
    return prov.max_order is None or K + 1 + (1 if nw else 0) <= prov.max_order


def _highest_order(prov: Any, setup: Any, est: bool, max_order: int) -> int:
    """The highest jet order the provider serves, with the estimate, up to ``max_order``."""
    top = int(max_order)
    if prov.max_jet_order is not None:
        top = min(top, int(prov.max_jet_order))
    if prov.max_order is not None:
        extra = 1 + (1 if est else 0) + (1 if setup.control.n_params else 0)
        top = min(top, int(prov.max_order) - extra)
    return max(top, 1)


def _sweep(setup: Any, *, closure: str, order: int, method: str, rtol: float, atol: float,
           step: Any, est: bool, difference: str, delta: Any, backend: str,
           accuracy: Accuracy, warnings: list, options: dict,
           budget: int | None = None, held: int = 0) -> Draft:
    """One sweep at jet order ``order``, within ``budget`` bytes, of which ``held`` are
    taken already (`invimbed._core.sweep.memory`)."""
    if _compiled_adaptive(backend, method):
        if step is not None:
            options.setdefault("max_step", float(step))
        return get_backend(backend, "sweep_adaptive")(
            setup, closure=closure, order=order, method=method, rtol=rtol, atol=atol, est=est,
            accuracy=accuracy, warnings_=warnings, **options,
            memory_budget=budget, memory_held=held,
            look_ahead=_serves(setup.provider, order + 2, est, setup.control.n_params),
            finish=lambda r: mark_unchecked(r, closure, est, method))
    if backend != "numpy":
        run = get_backend(backend, "sweep")
        res = run(backend, setup, closure=closure, order=order, method=method, step=step,
                  difference=difference, delta=delta, estimate_error=est, rtol=rtol,
                  atol=atol, memory_budget=budget, **options)
        return rejudge(setup, res, accuracy, warnings)
    prov = setup.provider
    if closure in ("jet", "crop"):
        if prov.max_jet_order is not None and order > prov.max_jet_order:
            raise DerivativeOrderError(
                f"closure='jet' of order {order} needs exact derivatives of order "
                f"{order + 1} and more, but the {prov.name} serves jets up to order "
                f"{prov.max_jet_order}; give exact derivatives (BolzaProblem.from_sympy, "
                f"or user callables in `derivatives=` with a provider)"
            )
        need = order + 1 + (1 if est else 0)
        if setup.control.n_params:
            need += 1   # mixed derivatives of grad_w f to the degree of V
        if prov.max_order is not None and need > prov.max_order:
            hint = " or pass estimate_error=False" if est and need - 1 <= prov.max_order else ""
            raise DerivativeOrderError(
                f"closure='jet' of order {order}{' with its error estimate' if est else ''} "
                f"needs derivatives up to order {need}, but the {prov.name} gives up to "
                f"{prov.max_order}; give exact derivatives (user callables or a symbolic "
                f"provider){hint}"
            )
        clo = JetClosure(prov, setup.control, setup.x, setup.q, order=order,
                         estimate_error=est, crop=(closure == "crop"),
                         ratio_test=accuracy.ratio_test,
                         look_ahead=_serves(prov, order + 2, est, setup.control.n_params),
                         time_free=time_free(setup.problem, prov))
    else:
        clo = StencilClosure(prov, setup.control, setup.x, setup.q, difference=difference,
                             delta=delta, time_free=time_free(setup.problem, prov))

    def per_depth(p: float, y: np.ndarray):
        fl = clo.fields(y)                 # depth_grad: by collect_results, all at once
        if isinstance(clo, JetClosure):
            return fl, clo.error_estimate(y), clo.lower_difference(y), clo.upper_difference(y)
        return fl, clo.error_estimate(y)

    if method in SPARSE_JACOBIAN and isinstance(clo, JetClosure):
        # the implicit methods difference and factorise the Jacobian of the whole jet
        # state otherwise: at order 5 with its estimate and ratio test, over a thousand
        # columns per input (docs/accuracy.md, "When a higher order fails")
        # differenced in one vectorized call per Jacobian (`JetClosure.rhs_columns`)
        options = {**options, "jac_sparsity": clo.jacobian_sparsity(), "vectorized": True}
    sink = memory_plan(setup, clo, method, budget, per_depth, held)   # None: states kept
    y0 = clo.initial_state()
    breakpoints = setup.control.breakpoints
    outcome = integrate(method, clo.rhs, y0, setup.q, setup.depths_desc, breakpoints,
                        setup.piece_of, rtol=rtol, atol=atol, step=step,
                        disc_step=clo.disc_step, ys=sink, options=options)
    fields_at = per_depth                  # of any state: for the dense output
    if sink is not None:
        outcome.ys, per_depth = sink.states(), sink.per_depth

    B, N = setup.x.shape

    shapes = {"z": (B, N), "value": (B,), "adjoint": (B, N),
              "param_grad": (B, setup.control.n_params), "depth_grad": (B,)}
    res = collect_results(setup, outcome, per_depth, shapes, closure=clo.name, method=method,
                          with_errors=clo.has_error_estimate, accuracy=accuracy,
                          warnings=warnings, predict=accuracy.checked)
    return attach_closure_dense(res, setup, outcome, clo, fields_at, shapes, method,
                                finish=lambda r: mark_unchecked(r, closure, est, method))


#: scipy's implicit methods that take ``jac_sparsity`` (LSODA does not).
SPARSE_JACOBIAN = ("BDF", "Radau")


def _compiled_adaptive(backend: str, method: str) -> bool:
    """Whether the sweep runs on the compiled adaptive kernel (numba, RK45 or RK23)."""
    return backend == "numba" and method in ("RK45", "RK23")


def rejudge(setup: Any, res: Draft, accuracy: Accuracy, warnings: list) -> Draft:
    """Apply `assess` with ``accuracy`` to a backend's draft (its own verdict used the default
    criterion); the backends carry no lower order, so no ratio test: without ``tol`` the
    estimate alone is judged with `safety_factor` (the fixed-step sweeps of numba and
    cupy share this verdict)."""
    res = res.but(warnings=list(warnings) + [w for w in res.get("warnings", [])
                                               if w.code not in ("estimate_large",)])
    if res.get("error_estimate") is None or res.status == Status.FAILED:
        return res

    def lead(a):
        a = np.asarray(a)
        return a if setup.batched else a[:, None]

    fields = {k: lead(res[k]) for k in res.error_estimate}
    errors = {k: lead(v) for k, v in res.error_estimate.items()}
    verdict = assess(setup.depths, fields, errors, None, accuracy,
                     safety=safety_factor(accuracy))
    res = res.but(converged=verdict.converged if setup.batched else verdict.converged[:, 0],
                  warnings=res.warnings + verdict.warnings)
    if not verdict.all_converged:
        return res.but(success=False, status=Status.NOT_CONVERGED, message=verdict.message)
    if res.status == Status.NOT_CONVERGED:      # the backend's own verdict, overruled
        res = res.but(message="The sweep reached every requested depth.")
    return res.but(success=True, status=Status.SUCCESS)
