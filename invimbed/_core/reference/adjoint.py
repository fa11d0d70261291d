"""The classical reference: forward solve and backward adjoint, exact at every depth.

For each depth ``p_i`` and input ``x`` (docs: theory, "The classical adjoint method"):
integrate ``z`` and the running loss forward from ``p_i`` to ``q``; then the adjoint
``d lambda/dt = -([grad_z f]^T lambda + grad_z R)``, ``lambda(q) = grad T(z(q))``, and the
parameter adjoint ``d mu/dt = -([grad_w f]^T lambda + grad_w R)``, ``mu(q) = 0``, backward
from ``q`` to ``p_i`` with ``z(t)`` from the forward pass's dense output (the paper's
eq. (11); Chen et al.'s augmented adjoint). Then ``J = int R + T(z(q))``,
``grad_x J = lambda(p_i)``, ``dJ/dw = mu(p_i)`` and ``dJ/dp = -(lambda(p_i) . f + R)``
at ``t = p_i``.

Two strategies compute exactly this:

* ``"ensemble"``: every (depth, input) pair is one row of a single solve
  (`invimbed._core.integrators.ensemble`): each row runs from its own ``p_i`` in the problem's
  own time, with its own adaptive step size and error control, all rows vectorised;
* ``"per_depth"``: one forward and one backward scipy solve per depth, the simplest
  reference, with every scipy method.

It shares nothing with the imbedding closures beyond the problem and its derivative
provider: it is what the imbedding sweep is verified against.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from scipy.integrate import OdeSolution

from ..results.failures import empty_fields, row_failure_reason
from ..integrators import SCIPY_METHODS
from ..integrators.common import DEFAULT_MAX_STEPS, SolverSteps, segments
from ..integrators.scipy_ivp import EXPLICIT, SOLVERS as _SCIPY_SOLVERS, stiff_step
from ..integrators.ensemble import DONE, ENSEMBLE_METHODS, MAX_STEPS, NONFINITE, integrate_rows
from ..integrators.tableau import TABLEAUX
from ..problem.bolza import BolzaProblem
from ..results.results import ImbeddingResult, SolverWarning, sweep_result
from ..results.status import Status
from ..setup.arguments import DEFAULT_ATOL, DEFAULT_RTOL, Setup, prepare
from ..setup.settings import Accuracy, Integrator, settle
from ..sweep.assembly import depth_gradient, mark_imprecise, pack_result
from ..runtime.backends import check_backend, get_backend
from .row_chunks import RowCost, output_bytes, resolve_budget, run_in_chunks
from ..inputs.validation import as_ivp_options, check_choice

STRATEGIES = ("ensemble", "per_depth")
#: Keyword options of `solve_adjoint` beyond its named arguments.
OPTIONS = ("first_step", "max_step", "max_steps")


def solve_adjoint(problem: BolzaProblem, x: Any, depths: Any, *, control: Any = None,
                  method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
                  strategy: str = "ensemble", backend: str = "numpy",
                  memory_budget: int | str | None = None,
                  accuracy: Accuracy | None = None, integrator: Integrator | None = None,
                  **options: Any) -> ImbeddingResult:
    """Exact fields of every depth by the classical adjoint method.

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
    depths : array_like, shape (n,)
        Strictly monotone depths ``p_i <= q``.
    control : Constant, PiecewiseConstant, Control or None
    method : str, default "RK45"
        ``"RK45"`` (Dormand-Prince 5(4)) or ``"RK23"`` (Bogacki-Shampine 3(2)) for the
        ensemble; any ``scipy.integrate.solve_ivp`` method for ``strategy="per_depth"``.
        The ensemble does not run ``"DOP853"`` or the implicit methods for stiff problems
        (``"Radau"``, ``"BDF"``, ``"LSODA"``): with those it solves depth by depth and says
        so in the result (``strategy``, ``warnings``, ``message``).
    rtol, atol : float
        Tolerances of the forward and backward solves (scipy's meaning, per row).
    strategy : {"ensemble", "per_depth"}, default "ensemble"
        ``"ensemble"``: every (depth, input) pair is one row of a single vectorised solve,
        each row with its own adaptive steps, stopping exactly at the control's
        breakpoints; the backward pass reads the forward pass's dense output, which costs
        ``(S (k + 2) + 2)`` floats per accepted forward step and row (``S = N + 1``,
        ``k + 1 = 4`` for RK45). ``"per_depth"``: one forward and one backward scipy solve
        per depth; the simplest reference.
    backend : {"numpy", "numba", "cuda"}, default "numpy"
        ``"numba"`` runs the ensemble as one compiled kernel, a loop over the rows in
        chunks on numba's threads (``pip install invimbed[numba]``): the problem's functions must compile with numba
        (per-sample ``@njit`` functions or a `from_sympy` problem). ``"cuda"`` runs it on
        an NVIDIA GPU, one thread per row (``pip install invimbed[cuda]``), for problems
        built with `from_sympy` or ``derivatives="trace"``; ``memory_budget`` then bounds
        the device's memory too (docs/performance.md, "Which GPU path").
    memory_budget : int, str or None, default None
        The most memory the ensemble may hold at once: bytes (an int) or a string with a
        unit (``"512MB"``, ``"2GiB"``; kB, MB, GB, TB and KiB, MiB, GiB, TiB). Its rows are
        solved in chunks that fit, deepest depths first; every row's numbers are those
        of one run of all rows, bit for bit (docs/performance.md, "Memory budget"). The
        default is half of what the process can still allocate (the system's available
        memory, or the room left under ``ulimit -v``), and of that at most 1 GiB beyond
        the outputs.
    accuracy : Accuracy, optional
        ``rtol`` and ``atol`` as one object (its other fields are the sweep's: leave them
        at their defaults); docs/method.md, "Settings as objects".
    integrator : Integrator, optional
        ``method`` and the ``**options`` as one object (no ``step`` or ``min_step``). A
        keyword left at its default defers to the objects; one that sets a field an
        object sets differently is a ValueError naming both.
    **options
        ``first_step``, ``max_step`` (as in `scipy.integrate.solve_ivp`) and ``max_steps``
        (default 10,000: attempted steps per row, or per solve with ``"per_depth"``).
        An explicit method whose steps sit at its stability limit stops earlier, where
        the steps left at that size exceed the budget: the message says the problem
        looks stiff and names Radau and BDF (docs/method.md, "The classical reference").

    Returns
    -------
    ImbeddingResult
        The same fields as `solve_imbedding` (``error_estimate`` is None), plus
        ``strategy`` (what ran), ``nsteps`` (steps per depth and input, forward and
        backward together) and ``warnings`` (a list of `SolverWarning`). ``nfev`` counts
        vectorised right-hand-side calls (with ``backend="numba"``: the largest count of
        one row; with several chunks, the sum of their vectorised calls). A row that fails (non-finite value, step-size underflow,
        more than ``max_steps`` steps) has NaN fields and makes ``success`` False, with a
        message naming its depth and input; the other rows keep their values.

    Raises
    ------
    TypeError
        For an unknown keyword argument (with the closest option name) or an argument of
        the wrong type (``rtol="1e-6"``, a complex ``x``), naming it.
    ValueError
        For an unknown ``strategy``, ``backend`` or ``method``, an option out of range,
        an ``x`` or control of the wrong size (naming ``x`` or ``control``), or a
        ``memory_budget`` that is not a positive size.
    MemoryError
        If the ensemble's outputs alone exceed ``memory_budget`` (before they are
        allocated): the message names the rows, the budget and `invimbed.dask.solve_batch`,
        which solves the rows chunk by chunk and can keep the outputs on its workers.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> problem = invimbed.BolzaProblem(lambda t, z, th: 0.7 * z,
    ...                                 terminal_loss=lambda z: 0.5 * z @ z)
    >>> res = invimbed.solve_adjoint(problem, [1.3], [-1.0], rtol=1e-10, atol=1e-12)
    >>> round(float(res.depth_grad[0]), 3)   # exact: -0.7 * 1.3**2 * exp(1.4)
    -4.797
    """
    check_choice(strategy, "strategy", STRATEGIES)
    check_backend(backend, "ensemble")
    budget = resolve_budget(memory_budget)
    integrator = settle(Integrator, integrator, {"method": (method, "RK45"), **{
        k: (v, None) for k, v in _options(options).items()}}, argument="integrator",
        unused=("step", "min_step"), caller="solve_adjoint", choices={"method": SCIPY_METHODS})
    accuracy = settle(Accuracy, accuracy, {"rtol": (rtol, DEFAULT_RTOL),
                                           "atol": (atol, DEFAULT_ATOL)},
                      argument="accuracy", unused=("tol", "max_order", "ratio_test", "fallback"),
                      caller="solve_adjoint")
    setup = prepare(problem, x, depths, control, allowed_methods=SCIPY_METHODS,
                    integrator=integrator, accuracy=accuracy)
    method, rtol, atol = integrator.method, setup.accuracy.rtol, setup.accuracy.atol
    opts = {"max_steps": DEFAULT_MAX_STEPS, **integrator.options}
    warnings: list[SolverWarning] = []
    if strategy == "ensemble" and method not in ENSEMBLE_METHODS:
        strategy = "per_depth"
        warnings.append(SolverWarning(
            "ran_per_depth", f"method={method!r} is not run by the ensemble (it runs "
            f"{', '.join(map(repr, ENSEMBLE_METHODS))}): the depths were solved one at a time "
            f"(strategy='per_depth')"))
    if backend != "numpy":
        if strategy != "ensemble":
            raise ValueError(f"`backend={backend!r}` runs the ensemble only (method 'RK45' "
                             f"or 'RK23', strategy='ensemble'), but got "
                             f"strategy={strategy!r} and method={method!r}")
        run, row_cost = get_backend(backend, "ensemble")
        fields, nfev, status, failure = run_in_chunks(
            lambda sub: run(sub, method, rtol, atol, opts), setup, budget, row_cost(setup),
            opts["max_steps"], max)
    elif strategy == "ensemble":
        fields, nfev, status, failure = run_in_chunks(
            lambda sub: _ensemble(sub, method, rtol, atol, opts), setup, budget,
            _row_cost(setup, method), opts["max_steps"], sum)
    else:
        fields, nfev, status, failure = _per_depth(setup, method, rtol, atol, opts)
    message = ("The adjoint solves reached every requested depth." if failure is None
               else failure)
    return sweep_result(mark_imprecise(setup, pack_result(
        setup, fields, success=status.success, status=status, message=message, nfev=nfev,
        closure="adjoint", method=method, strategy=strategy, warnings=warnings)))


def _options(options: dict) -> dict:
    """The keyword options, checked (`as_ivp_options`)."""
    return as_ivp_options(options, "solve_adjoint", OPTIONS,
                          suggest=inspect.signature(solve_adjoint).parameters)


# -- the equations (both strategies) ----------------------------------------------------
def forward_rates(prov: Any, t: Any, z: np.ndarray, th: np.ndarray) -> np.ndarray:
    """``[f, R]`` of every row: the forward pass of ``y = [z, int R]``, shape (k, N + 1)."""
    return np.concatenate([prov.derivative("f", t, z, th),
                           prov.derivative("R", t, z, th)[:, None]], axis=1)


def adjoint_rates(prov: Any, t: Any, z: np.ndarray, th: np.ndarray, lam: np.ndarray,
                  jac: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """The adjoint equations of every row (module docstring; the paper's eq. (11)):
    ``d lambda/dt = -(f_z^T lambda + R_z)`` and, with ``jac`` (``d theta / d w``, shape
    (k, M, n_w) or (M, n_w)), ``d mu/dt = -((f_theta^T lambda + R_theta) jac)``, else
    None. ``z``, ``th``, ``lam`` have one row per trajectory."""
    dlam = -(np.einsum("kji,kj->ki", prov.derivative("f", t, z, th, dz=1), lam)
             + prov.derivative("R", t, z, th, dz=1))
    if jac is None:
        return dlam, None
    g = (np.einsum("kjm,kj->km", prov.derivative("f", t, z, th, dth=1), lam)
         + prov.derivative("R", t, z, th, dth=1))
    if np.ndim(jac) != 3 or np.shape(jac)[0] != lam.shape[0]:     # one for every row
        jac = np.broadcast_to(jac, (lam.shape[0],) + np.shape(jac)[-2:])
    return dlam, -np.einsum("km,kmw->kw", g, jac)


# -- strategy "ensemble" ----------------------------------------------------------------
def _row_cost(setup: Setup, method: str) -> RowCost:
    """Bytes per row of `_ensemble` (`invimbed._core.reference.row_chunks`): the working arrays of
    `integrate_rows` and the problem's derivatives, and per step the dense output
    (``(S (k + 2) + 3)`` floats with its row index, half again for the copies made while
    it is sorted by row). Measured with `tracemalloc` (docs/performance.md, "Memory
    budget"), this is 1.6 to 2.3 times a chunk's peak."""
    N, M, nw = setup.x.shape[1], setup.control.size, setup.control.n_params
    S = N + max(1, nw)
    tab = TABLEAUX[method]
    work = 8 * ((tab.n_stages + 8) * S + 2 * N * (N + M + nw) + 32)
    step = 12 * ((N + 1) * (tab.P.shape[1] + 1) + 3)
    return RowCost(held=output_bytes(setup) + 34, work=work, step=step)


def _ensemble(setup: Setup, method: str, rtol: float, atol: float,
              opts: dict) -> tuple[dict, int, tuple]:
    prov, ctrl, q = setup.provider, setup.control, setup.q
    B, N = setup.x.shape
    n, nw = setup.depths_desc.size, ctrl.n_params
    rows = n * B
    p = np.repeat(setup.depths_desc, B)                 # row r = (depth r // B, input r % B)
    x = np.tile(setup.x, (n, 1))
    qs = np.full(rows, q)
    stops = np.sort(ctrl.breakpoints[(ctrl.breakpoints > p.min()) & (ctrl.breakpoints < q)])
    tab = TABLEAUX[method]
    common = dict(tableau=tab, rtol=rtol, atol=atol, max_steps=opts["max_steps"], stops=stops,
                  pieces=lambda lo, hi, rows: ctrl.pieces(lo, hi),
                  first_step=opts.get("first_step"), max_step=opts.get("max_step", np.inf))

    def forward(t, y, rows, piece):
        return forward_rates(prov, t, y[:, :N], ctrl.theta_rows(t, piece))

    fwd = integrate_rows(forward, p, qs, np.concatenate([x, np.zeros((rows, 1))], axis=1),
                         record=True, **common)
    ok = fwd.status == DONE
    zq = fwd.y[:, :N]
    value = np.full(rows, np.nan)
    lam_q = np.full((rows, N), np.nan)
    if np.any(ok):
        value[ok] = fwd.y[ok, N] + prov.derivative("T", q, zq[ok], None)
        lam_q[ok] = prov.derivative("T", q, zq[ok], None, dz=1)
    dense = fwd.dense

    def backward(t, y, rows, piece):
        z = dense(t, rows)[:, :N]
        dlam, dmu = adjoint_rates(prov, t, z, ctrl.theta_rows(t, piece), y[:, :N],
                                  ctrl.jacobian_rows(t, piece) if nw else None)
        return dlam if dmu is None else np.concatenate([dlam, dmu], axis=1)

    start = np.where(ok, q, p)                           # failed rows: nothing to do
    bwd = integrate_rows(backward, start, p, np.concatenate(
        [np.where(ok[:, None], lam_q, 0.0), np.zeros((rows, nw))], axis=1), **common)
    good = ok & (bwd.status == DONE)
    adjoint = np.where(good[:, None], bwd.y[:, :N], np.nan)
    fields = empty_fields(n, B, N, nw)
    fields["z"][:] = np.where(good[:, None], zq, np.nan).reshape(n, B, N)
    fields["value"][:] = np.where(good, value, np.nan).reshape(n, B)
    fields["adjoint"][:] = adjoint.reshape(n, B, N)
    fields["param_grad"][:] = np.where(good[:, None], bwd.y[:, N:], np.nan).reshape(n, B, nw)
    fields["nsteps"][:] = (fwd.nsteps + bwd.nsteps).reshape(n, B)
    nfev = fwd.nfev + bwd.nfev
    if np.any(good):
        fields["depth_grad"].reshape(rows)[good] = depth_gradient(setup, p[good], adjoint[good],
                                                               x[good])
    rows = (fwd.status, bwd.status, np.where(ok, bwd.t, fwd.t),
            np.where(ok, bwd.h_lambda, fwd.h_lambda))
    return fields, nfev, rows


# -- strategy "per_depth" ---------------------------------------------------------------
class _NonFinite(ArithmeticError):
    def __init__(self, t: float) -> None:
        super().__init__(t)
        self.t = t


def _solve(fun, t0: float, t1: float, y0: np.ndarray, method: str, rtol: float,
           atol: float, opts: dict, dense: bool) -> tuple[str | None, float, np.ndarray, Any, int, int]:
    """One scipy solve with a step budget and a stop on non-finite values.

    Returns ``(failure, t, y, dense_output, nfev, nsteps)``: ``failure`` is None or the
    reason, ``t`` where the solve ended.
    """
    def guarded(t, y):
        dy = fun(t, y)
        if not np.all(np.isfinite(dy)):
            raise _NonFinite(t)
        return dy

    extra = {k: opts[k] for k in ("first_step", "max_step") if k in opts}
    if "first_step" in extra:
        extra["first_step"] = min(extra["first_step"], abs(t1 - t0))
    try:
        solver = _SCIPY_SOLVERS[method](guarded, t0, y0, t1, rtol=rtol, atol=atol, **extra)
    except _NonFinite as exc:
        return row_failure_reason(NONFINITE, 0, 0.0), exc.t, y0, None, 1, 0
    ts, parts = [t0], []
    loop = SolverSteps(solver, opts["max_steps"])
    run, h_lambda, stiff = 0, 0.0, False     # an explicit method's early stop, as the sweep's
    try:
        for _ in loop:
            if dense:
                parts.append(solver.dense_output())
                ts.append(solver.t)
            if method in EXPLICIT:
                run, h_lambda, stiff = stiff_step(solver, run, loop.steps, t1,
                                                  opts["max_steps"])
                if stiff:
                    break
    except _NonFinite as exc:
        return (row_failure_reason(NONFINITE, 0, 0.0), exc.t, solver.y, None, solver.nfev,
                loop.steps)
    if loop.end == "max_steps" or stiff:
        return (row_failure_reason(MAX_STEPS, opts["max_steps"], h_lambda), solver.t,
                solver.y, None, solver.nfev, loop.steps)
    if loop.end == "failed":
        return f"{loop.message}", solver.t, solver.y, None, solver.nfev, loop.steps
    sol = OdeSolution(ts, parts) if dense else None
    return None, solver.t, solver.y, sol, solver.nfev, loop.steps


def _per_depth(setup: Setup, method: str, rtol: float, atol: float,
               opts: dict) -> tuple[dict, int, Status, str | None]:
    """``(fields, nfev, status, failure)``: `Status.FAILED` and the message naming the
    first failed depth if any depth failed, `Status.SUCCESS` and None otherwise."""
    B, N = setup.x.shape
    n, nw = setup.depths_desc.size, setup.control.n_params
    fields = empty_fields(n, B, N, nw)
    nfev = 0
    failure, failed = None, 0
    for i, p in enumerate(setup.depths_desc):
        reason, t_fail, out, count, steps = _one_depth(setup, float(p), method, rtol, atol,
                                                       opts)
        nfev += count
        fields["nsteps"][i] = steps
        if reason is not None:
            failed += 1
            if failure is None:
                failure = (float(p), t_fail, reason)
            continue
        for k, v in out.items():
            fields[k][i] = v
        fields["depth_grad"][i] = depth_gradient(setup, float(p), out["adjoint"])
    if failure is not None:
        p, t_fail, reason = failure
        where, _, reason = reason.partition(": ")
        message = (f"The {where} failed for depth p = {p:.10g} at t = {t_fail:.10g}: "
                   f"{reason}. {failed} of {n} depths failed; the others are exact to the "
                   f"tolerances.")
        return fields, nfev, Status.FAILED, message
    return fields, nfev, Status.SUCCESS, None


def _one_depth(setup: Setup, p: float, method: str, rtol: float, atol: float,
               opts: dict) -> tuple[str | None, float, dict, int, int]:
    prov = setup.provider
    ctrl = setup.control
    q = setup.q
    B, N = setup.x.shape
    M, nw = ctrl.size, ctrl.n_params
    nfev = nsteps = 0
    if p == q:
        z = setup.x
        lam = prov.derivative("T", q, z, None, dz=1)
        return None, q, {"z": z.copy(), "value": prov.derivative("T", q, z, None),
                         "adjoint": lam, "param_grad": np.zeros((B, nw))}, 0, 0
    pieces = [(lo, hi, setup.piece_of(hi, lo))                 # forward in t: p up to q
              for hi, lo in segments(q, p, ctrl.breakpoints)[::-1]]

    def forward(piece, _):
        def rates(t, yy):
            th = np.broadcast_to(ctrl.theta(t, piece), (B, M))
            fr = forward_rates(prov, t, yy[:B * N].reshape(B, N), th)
            return np.concatenate([fr[:, :N].ravel(), fr[:, N]])
        return rates

    fail, t_end, y, dense, nfev, nsteps = _solve_pieces(
        "forward solve", forward, pieces, np.concatenate([setup.x.ravel(), np.zeros(B)]),
        method, rtol, atol, opts, dense=True)
    if fail is not None:
        return fail, t_end, {}, nfev, nsteps
    zq = y[:B * N].reshape(B, N)
    value = y[B * N:] + prov.derivative("T", q, zq, None)
    lam = prov.derivative("T", q, zq, None, dz=1)
    mu = np.zeros((B, nw))

    def backward(piece, sol_z):
        def rates(t, yy):
            z = sol_z(t)[:B * N].reshape(B, N)
            th = np.broadcast_to(ctrl.theta(t, piece), (B, M))
            dl, dm = adjoint_rates(prov, t, z, th, yy[:B * N].reshape(B, N),
                                   ctrl.jacobian(t, piece) if nw else None)
            return dl.ravel() if dm is None else np.concatenate([dl.ravel(), dm.ravel()])
        return rates

    back = [(hi, lo, piece) for lo, hi, piece in reversed(pieces)]
    fail, t_end, yb, _, count, steps = _solve_pieces(
        "backward adjoint solve", backward, back, np.concatenate([lam.ravel(), mu.ravel()]),
        method, rtol, atol, opts, dense=False, sols=dense[::-1])
    nfev += count
    nsteps += steps
    if fail is not None:
        return fail, t_end, {}, nfev, nsteps
    return None, p, {"z": zq, "value": value, "adjoint": yb[:B * N].reshape(B, N),
                     "param_grad": yb[B * N:].reshape(B, nw)}, nfev, nsteps


def _solve_pieces(where: str, rates_of: Any, pieces: list, y: np.ndarray, method: str,
                  rtol: float, atol: float, opts: dict, dense: bool,
                  sols: list | None = None) -> tuple[str | None, float, np.ndarray, list, int,
                                                     int]:
    """`_solve` over the control's pieces ``(t0, t1, piece)`` one after the other, the
    right-hand side of each ``rates_of(piece, sol)`` (``sol``: that piece's entry of
    ``sols``, or None). Returns ``(failure, t, y, dense_outputs, nfev, nsteps)``:
    ``failure`` is None or ``where``'s reason, ``t`` where the solve ended."""
    nfev = nsteps = 0
    out, t_end = [], None
    for k, (t0, t1, piece) in enumerate(pieces):
        fail, t_end, y_end, sol, count, steps = _solve(
            rates_of(piece, None if sols is None else sols[k]), t0, t1, y, method, rtol,
            atol, opts, dense=dense)
        nfev += count
        nsteps += steps
        if fail is not None:
            return f"{where}: {fail}", t_end, y, out, nfev, nsteps
        out.append(sol)
        y = y_end
    return None, t_end, y, out, nfev, nsteps
