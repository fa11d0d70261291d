"""Direct optimisation of open-loop controls and of the depth (issue 4, section 2).

Two drivers built on the public solvers only:

* `optimize_control` minimises ``J(w; p, x)`` over the parameters ``w`` of an open-loop
  control with ``scipy.optimize.minimize``; the gradient ``dJ/dw`` comes from one
  imbedding sweep (``param_grad``, eq. aug-lam-th-pde) or from the classical adjoint
  reference (DESIGN.md section 4).
* `optimal_depth` sweeps once over a grid of depths and locates the depth ``p`` that
  minimises ``J(p, x)`` from the exact depth gradient ``dJ/dp = -(Lam . Phi + R)``
  (DESIGN.md section 2; the paper's "optimal depth" remark after eq. aug-lam-t-pde).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import Bounds, OptimizeResult, brentq, minimize

from ._adjoint import solve_adjoint
from ._controls import OpenLoopControl
from ._imbedding import solve_imbedding
from ._problem import BolzaProblem
from ._validation import as_float_array, as_state, describe

#: ``scipy.optimize.minimize`` methods that use no gradient (``jac`` is not passed).
GRADIENT_FREE = ("nelder-mead", "powell", "cobyla", "cobyqa")
#: Methods that accept ``bounds``.
BOUNDED = ("nelder-mead", "l-bfgs-b", "tnc", "slsqp", "powell", "trust-constr", "cobyla",
           "cobyqa")


class _SolverFailure(RuntimeError):
    """A solve inside the objective did not succeed (turned into ``success=False``)."""


# ---------------------------------------------------------------------------------------
# optimize_control
# ---------------------------------------------------------------------------------------
def optimize_control(problem: BolzaProblem, x: Any, control: OpenLoopControl, *,
                     p: float | None = None, gradient: str = "imbedding",
                     method: str | Callable = "L-BFGS-B", bounds: Any = None,
                     options: dict | None = None, callback: Callable | None = None,
                     progress: bool = False, trajectory_points: int = 201,
                     **solve_kwargs: Any) -> OptimizeResult:
    r"""Minimise ``J(w; p, x)`` over the parameters ``w`` of an open-loop control.

    The direct method: ``scipy.optimize.minimize`` on ``w -> J(w; p, x)`` with the
    gradient ``dJ/dw`` of the same solve, either from the imbedding sweep
    (`solve_imbedding`'s ``param_grad``, eq. aug-lam-th-pde) or from the classical
    forward/backward adjoint (`solve_adjoint`). Each evaluation of the objective is
    one solve at the single depth ``p``.

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
        The input (state at ``t = p``). For a batch the objective is the **mean** of
        ``J(w; p, x_b)`` over the ``B`` inputs (and its gradient the mean gradient): one
        open-loop control for all of them.
    control : Constant, PiecewiseConstant or Control
        The control family and the starting point ``w0 = control.w``; the optimum is
        returned as ``control.with_params(w*)``.
    p : float, optional
        The depth (start time). Default: ``control.knots[0]`` for a `PiecewiseConstant`
        (its lower time limit), otherwise ``problem.q - 1``. Must satisfy ``p < q``.
    gradient : {"imbedding", "adjoint"}
        Where ``dJ/dw`` comes from. ``"imbedding"`` (default) is one sweep in ``p`` from
        ``q`` down to ``p``; with the jet closure of order 1 it is exact (to integrator
        tolerance) when ``f`` is affine in ``z`` and ``R``, ``T`` are at most quadratic in
        ``z`` (linear-quadratic problems), and otherwise carries the closure's truncation
        error ``O((q - p)^3)`` (DESIGN.md section 3): the optimiser then finds the optimum
        of the imbedded model, not of the exact ``J``. Prefer ``"adjoint"`` for deep,
        strongly nonlinear problems, or raise ``order=``.
    method : str or callable, default "L-BFGS-B"
        Any ``scipy.optimize.minimize`` method. Gradient-free methods (Nelder-Mead,
        Powell, COBYLA, COBYQA) get the value only.
    bounds : sequence of (low, high) pairs, one (low, high) pair, or scipy.optimize.Bounds
        Bounds on ``w``; a single pair applies to every parameter; ``None`` for no bound.
    options : dict, optional
        Passed to ``minimize`` (e.g. ``{"maxiter": 200, "gtol": 1e-10}``).
    callback : callable ``callback(intermediate_result)``, optional
        Called after each iteration with an ``OptimizeResult`` holding ``x`` (``w``),
        ``fun``, ``jac`` (when known), ``nit`` and ``control``. Returning ``True`` stops
        the optimisation (``status`` 99, as scipy does for ``StopIteration``).
    progress : bool, default False
        Show a progress bar (``tqdm``, when installed; otherwise one line per iteration
        on ``stderr``).
    trajectory_points : int, default 201
        Number of times in the returned trajectory.
    **solve_kwargs
        Passed to `solve_imbedding` or `solve_adjoint` (``rtol``, ``atol``, ``closure``,
        ...); since ``method`` names the optimiser here, the integrator is chosen with
        ``solver_method=`` (e.g. ``solver_method="DOP853"``). For
        ``gradient="imbedding"`` the default is ``estimate_error=False`` (the error
        estimate costs one more derivative order per evaluation).

    Returns
    -------
    OptimizeResult
        scipy's result (``x`` = ``w*``, ``fun`` = ``J(w*)``, ``jac``, ``nit``, ``nfev``,
        ``success``, ``status``, ``message``) plus

        - ``control``: ``control.with_params(w*)``;
        - ``p``, ``gradient``: what was optimised and how;
        - ``trajectory``: an ``OptimizeResult`` with ``t`` (``trajectory_points`` times in
          ``[p, q]``), ``z`` (shape (n_t, N) or (n_t, B, N)) and ``theta`` (shape
          (n_t, M)), from a forward ``scipy.integrate.solve_ivp`` under the optimal
          control (independent of the gradient source);
        - ``nfev_solver``: right-hand-side evaluations of all the solves;
          ``nsolve``: number of solves.

        A solve that fails inside the objective ends the optimisation with
        ``success=False`` and the solver's message; ``x`` is then the last parameter
        vector whose solve succeeded.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments; the message names the argument.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> problem = invimbed.BolzaProblem(
    ...     lambda t, z, u: -z + u, running_loss=lambda t, z, u: 0.5 * (z @ z + u @ u),
    ...     terminal_loss=lambda z: 0.5 * z @ z, q=1.0)
    >>> control = invimbed.PiecewiseConstant(np.linspace(0, 1, 5), np.zeros(4))
    >>> res = invimbed.optimize_control(problem, [1.0], control)
    >>> bool(res.success), res.control.values.shape
    (True, (4, 1))
    """
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got {describe(problem)}")
    if not isinstance(control, OpenLoopControl):
        raise TypeError("`control` must be an invimbed control (Constant, PiecewiseConstant, "
                        f"Control) whose parameters are optimised, but got {describe(control)}")
    if control.n_params == 0:
        raise ValueError("`control` has no parameters to optimise (n_params = 0)")
    if gradient not in ("imbedding", "adjoint"):
        raise ValueError(f"`gradient` must be 'imbedding' or 'adjoint', but got {gradient!r}")
    if not (isinstance(method, str) or callable(method)):
        raise TypeError(f"`method` must be a scipy.optimize.minimize method name or a "
                        f"callable, but got {describe(method)}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"`options` must be a dict, but got {describe(options)}")
    if callback is not None and not callable(callback):
        raise TypeError(f"`callback` must be callable, but got {describe(callback)}")
    if not isinstance(trajectory_points, (int, np.integer)) or trajectory_points < 2:
        raise ValueError(f"`trajectory_points` must be an integer >= 2, but got "
                         f"{describe(trajectory_points)}")
    xb, batched = as_state(x, None, "x")
    p = _default_depth(problem, control) if p is None else _as_depth(p, problem.q, "p")
    if p >= problem.q:
        raise ValueError(f"`p` must be < q = {problem.q} (at p = q the loss does not depend "
                         f"on the control), but got p = {p}")
    lo = getattr(control, "knots", None)
    if lo is not None and not (lo[0] - 1e-12 * max(1.0, abs(lo[0])) <= p):
        raise ValueError(f"`p` = {p} is below the control's first knot {lo[0]}: the control "
                         f"must cover [p, q]")
    method_name = method.lower() if isinstance(method, str) else None
    use_jac = method_name not in GRADIENT_FREE
    scipy_bounds = _as_bounds(bounds, control.n_params)
    if scipy_bounds is not None and method_name is not None and method_name not in BOUNDED:
        raise ValueError(f"`bounds` are not supported by method={method!r}; use one of "
                         f"'L-BFGS-B', 'TNC', 'SLSQP', 'trust-constr', 'Powell', 'Nelder-Mead'")

    kwargs = dict(solve_kwargs)
    if "solver_method" in kwargs:
        kwargs["method"] = kwargs.pop("solver_method")
    if gradient == "imbedding":
        kwargs.setdefault("estimate_error", False)
        solver = solve_imbedding
    else:
        solver = solve_adjoint
    state: dict[str, Any] = {"nfev": 0, "nsolve": 0, "last_good": None, "failure": None,
                             "cache": {}}

    def evaluate(w: np.ndarray) -> tuple[float, np.ndarray]:
        key = w.tobytes()
        if key in state["cache"]:
            return state["cache"][key]
        ctrl = control.with_params(w)
        res = solver(problem, x, [p], control=ctrl, **kwargs)
        state["nfev"] += int(res.nfev)
        state["nsolve"] += 1
        if not res.success:
            state["failure"] = (w.copy(), res.message)
            raise _SolverFailure(res.message)
        value = float(np.mean(res.value[0]))
        grad = np.mean(np.reshape(res.param_grad[0], (-1, control.n_params)), axis=0)
        state["cache"] = {key: (value, grad)}   # keep the last one only
        state["last_good"] = (w.copy(), value, grad)
        return value, grad

    def fun(w):
        value, grad = evaluate(np.asarray(w, dtype=float))
        return (value, grad) if use_jac else value

    bar = ProgressBar(progress, (options or {}).get("maxiter"), "optimize_control")
    nit = [0]

    def scipy_callback(intermediate_result):
        nit[0] += 1
        w = np.asarray(intermediate_result.x, dtype=float)
        cached = state["cache"].get(w.tobytes())
        if cached is None and state["last_good"] is not None:
            cached = state["last_good"][1:]
        value = float(getattr(intermediate_result, "fun", np.nan)) if cached is None else cached[0]
        bar.update(nit[0], value)
        if callback is not None:
            info = OptimizeResult(x=w.copy(), fun=value, nit=nit[0],
                                  control=control.with_params(w))
            if cached is not None:
                info["jac"] = cached[1].copy()
            if callback(info) is True:
                raise StopIteration

    w0 = np.asarray(control.w, dtype=float).copy()
    try:
        # the first solve validates what the solver reads (errors name the argument) and
        # is cached for scipy's first call
        evaluate(w0)
        res = minimize(fun, w0, jac=True if use_jac else None, method=method,
                       bounds=scipy_bounds, options=options, callback=scipy_callback)
    except _SolverFailure:
        w_fail, msg = state["failure"]
        good = state["last_good"]
        w_best = good[0] if good is not None else w0
        res = OptimizeResult(x=w_best, fun=good[1] if good else np.nan,
                             jac=good[2] if good else None, success=False, status=-1,
                             nit=nit[0], nfev=state["nsolve"],
                             message=f"The {gradient} solve failed at w = "
                                     f"{np.array2string(w_fail, precision=6, threshold=8)}: "
                                     f"{msg}")
    finally:
        bar.close()
    w_opt = np.asarray(res.x, dtype=float)
    res["control"] = control.with_params(w_opt)
    res["p"] = p
    res["gradient"] = gradient
    res["nfev_solver"] = state["nfev"]
    res["nsolve"] = state["nsolve"]
    rtol = float(solve_kwargs.get("rtol", 1e-8))
    atol = float(solve_kwargs.get("atol", 1e-10))
    res["trajectory"] = forward_trajectory(problem, xb, batched, res["control"], p,
                                           trajectory_points, rtol=min(rtol, 1e-8),
                                           atol=min(atol, 1e-10))
    return res


def forward_trajectory(problem: BolzaProblem, xb: np.ndarray, batched: bool,
                       control: OpenLoopControl, p: float, points: int, *,
                       rtol: float = 1e-8, atol: float = 1e-10) -> OptimizeResult:
    """``z(t)`` on ``points`` times in ``[p, q]`` by a forward ``solve_ivp`` per smooth
    piece of the control (no step straddles a jump)."""
    B, N = xb.shape
    M = control.size
    q = problem.q
    prov = problem.provider(N, M)
    grid = np.linspace(p, q, points)
    ends = [p] + sorted(float(b) for b in control.breakpoints if p < b < q) + [q]
    z = np.full((points, B, N), np.nan)
    y = xb.ravel().copy()
    z[0] = xb
    ok, message = True, "forward solve reached q"
    for a, b in zip(ends[:-1], ends[1:]):
        piece = control.piece(0.5 * (a + b), a, b)

        def rhs(t, yy, piece=piece):
            th = np.broadcast_to(control.theta(t, piece), (B, M))
            return prov.derivative("f", t, yy.reshape(B, N), th).ravel()

        sel = (grid > a) & (grid <= b)
        sol = solve_ivp(rhs, (a, b), y, rtol=rtol, atol=atol, dense_output=True)
        if sol.status != 0:
            ok, message = False, f"forward solve failed at t = {sol.t[-1]:.6g}: {sol.message}"
            break
        if np.any(sel):
            z[sel] = sol.sol(grid[sel]).T.reshape(-1, B, N)
        y = sol.y[:, -1]
    theta = np.stack([control.theta(t, control.piece(t)) for t in grid])
    return OptimizeResult(t=grid, z=z if batched else z[:, 0], theta=theta, success=ok,
                          message=message)


def _default_depth(problem: BolzaProblem, control: OpenLoopControl) -> float:
    knots = getattr(control, "knots", None)
    if knots is not None:
        return float(knots[0])
    return problem.q - 1.0


def _as_depth(p: Any, q: float, name: str) -> float:
    try:
        value = float(p)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`{name}` must be a real number, but got {describe(p)}") from exc
    if not np.isfinite(value):
        raise ValueError(f"`{name}` must be finite, but got {p!r}")
    return value


def _as_bounds(bounds: Any, n: int) -> Bounds | None:
    """Normalise ``bounds`` to ``scipy.optimize.Bounds`` (or None), checking feasibility."""
    if bounds is None:
        return None
    if isinstance(bounds, Bounds):
        lb = np.broadcast_to(np.asarray(bounds.lb, dtype=float), (n,))
        ub = np.broadcast_to(np.asarray(bounds.ub, dtype=float), (n,))
    else:
        try:
            pairs = [bounds] if np.ndim(np.array(bounds, dtype=object)) == 1 else bounds
            pairs = [tuple(pair) for pair in pairs]
            lb = np.array([-np.inf if pr[0] is None else pr[0] for pr in pairs], dtype=float)
            ub = np.array([np.inf if pr[1] is None else pr[1] for pr in pairs], dtype=float)
            if any(len(pr) != 2 for pr in pairs):
                raise ValueError
        except (TypeError, ValueError, IndexError) as exc:
            raise ValueError("`bounds` must be a (low, high) pair, a sequence of n_params such "
                             f"pairs or scipy.optimize.Bounds, but got {describe(bounds)}") from exc
        if lb.size == 1:
            lb, ub = np.repeat(lb, n), np.repeat(ub, n)
        if lb.size != n:
            raise ValueError(f"`bounds` must have one (low, high) pair per parameter "
                             f"(n_params = {n}) or a single pair, but got {lb.size} pairs")
    if np.any(np.isnan(lb)) or np.any(np.isnan(ub)):
        raise ValueError("`bounds` must not contain NaN")
    bad = np.flatnonzero(lb > ub)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"`bounds` are infeasible: low > high for parameter {i} "
                         f"({lb[i]} > {ub[i]})")
    return Bounds(np.array(lb, dtype=float), np.array(ub, dtype=float))


class ProgressBar:
    """tqdm when installed, otherwise a line on stderr every ``every`` iterations; or
    nothing when disabled."""

    def __init__(self, enabled: bool, total: int | None, desc: str, label: str = "J",
                 every: int = 1) -> None:
        self.enabled = bool(enabled)
        self.desc, self.label, self.every = desc, label, max(1, int(every))
        self.bar = None
        if not self.enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:  # optional dependency
            return
        self.bar = tqdm(total=total, desc=desc, unit="it")

    def update(self, nit: int, value: float) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix({self.label: f"{value:.6g}"})
        elif nit % self.every == 0 or nit == 1:
            print(f"{self.desc}: iteration {nit}, {self.label} = {value:.10g}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------------------------
# optimal_depth
# ---------------------------------------------------------------------------------------
class DepthResult(OptimizeResult):
    """Result of `optimal_depth`: a dict with attribute access and a `plot` method.

    Attributes
    ----------
    p : float
        The depth minimising ``J(p, x)`` over the range.
    value : float
        ``J`` at ``p`` (the mean over a batch of inputs).
    depth_grad : float
        ``dJ/dp`` at ``p`` (about 0 at an interior minimum).
    interior : bool
        Whether ``p`` is a stationary point inside the range (rather than an end).
    candidates, candidate_values : ndarray
        Every local minimiser found (refined interior roots of ``dJ/dp`` and the ends
        where ``J`` increases into the range), in increasing ``p``, and ``J`` there.
    grid, grid_value, grid_depth_grad : ndarray, shape (n,)
        The depth grid of the sweep and ``J``, ``dJ/dp`` on it.
    nfev : int
        Right-hand-side evaluations of all the solves; ``nsolve`` the number of solves.
    success, message
    """

    def plot(self, ax: Any = None) -> Any:
        """Plot ``J`` and ``dJ/dp`` against ``p`` and mark the optimal depth.

        Parameters
        ----------
        ax : matplotlib Axes or a pair of them, optional
            ``None``: a new figure with two panels (``J`` above, ``dJ/dp`` below). One
            Axes: ``J`` on it and ``dJ/dp`` on a twin y axis. A pair: one each.

        Returns
        -------
        tuple of Axes
            ``(ax_value, ax_depth_grad)``.
        """
        import matplotlib.pyplot as plt  # lazy: matplotlib is optional

        if ax is None:
            _, (ax_v, ax_g) = plt.subplots(2, 1, sharex=True, figsize=(6, 5))
        elif isinstance(ax, (tuple, list, np.ndarray)):
            ax_v, ax_g = ax[0], ax[1]
        else:
            ax_v, ax_g = ax, ax.twinx()
        ax_v.plot(self.grid, self.grid_value, "-", color="C0", label="J(p, x)")
        ax_g.plot(self.grid, self.grid_depth_grad, "--", color="C1", label="dJ/dp")
        ax_g.axhline(0.0, color="0.6", lw=0.8)
        for a in (ax_v, ax_g):
            a.axvline(self.p, color="C3", lw=0.8, ls=":")
        others = np.asarray(self.candidates) != self.p
        if np.any(others):
            ax_v.plot(np.asarray(self.candidates)[others],
                      np.asarray(self.candidate_values)[others], "o", mfc="none", color="C3",
                      label="other local minima")
        ax_v.plot([self.p], [self.value], "o", color="C3",
                  label=f"optimal depth p = {self.p:.6g}")
        ax_v.set_ylabel("J(p, x)")
        ax_g.set_ylabel("dJ/dp")
        ax_g.set_xlabel("depth p")
        ax_v.legend(loc="best")
        return ax_v, ax_g


def optimal_depth(problem: BolzaProblem, x: Any, p_range: Any, *, control: Any = None,
                  n: int = 101, xtol: float = 1e-12, **solve_kwargs: Any) -> DepthResult:
    r"""Locate the depth ``p`` in ``p_range`` that minimises ``J(p, x)``.

    One `solve_imbedding` sweep gives ``J(p_i, x)`` and the exact depth gradient
    ``dJ/dp = -(Lam . Phi + R)`` (DESIGN.md section 2) on a grid of ``n`` depths. Every
    sign change of ``dJ/dp`` from negative to positive brackets a local minimum, which
    ``scipy.optimize.brentq`` refines on ``dJ/dp`` (one sweep from ``q`` to the trial
    depth per evaluation). An end of the range is a candidate when ``J`` increases into
    the range from it (``dJ/dp > 0`` at the low end, ``< 0`` at the high end), which is
    how a monotone ``J`` returns the grid end. The candidate with the smallest ``J`` is
    returned. This is the paper's remark on the optimal depth of a network (after eq.
    aug-lam-t-pde), with the true depth gradient in place of the paper's recursion.

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
        The input; for a batch ``J`` is the mean over the inputs.
    p_range : (p_low, p_high)
        The depths searched, ``p_low < p_high <= q``.
    control : Constant, PiecewiseConstant, Control or None
        The (fixed) open-loop control; it must cover ``[p_low, q]``.
    n : int, default 101
        Grid size. Minima narrower than the grid spacing can be missed.
    xtol : float, default 1e-12
        Absolute tolerance of ``brentq`` (scaled by ``max(1, |p|)``).
    **solve_kwargs
        Passed to `solve_imbedding` (``closure``, ``order``, ``rtol``, ``atol``, ...).

    Returns
    -------
    DepthResult
        ``p``, ``value``, ``depth_grad``, ``interior``, ``candidates``,
        ``candidate_values``, ``grid``,
        ``grid_value``, ``grid_depth_grad``, ``nfev``, ``nsolve``, ``success``,
        ``message``, and ``plot(ax=None)``.

    Notes
    -----
    With the jet closure the depth gradient of a nonlinear problem carries the closure's
    truncation error (see `solve_imbedding`); the root is that of the imbedded model.
    At a jump of a piecewise-constant control ``dJ/dp`` is the derivative from above;
    a minimum at a kink is then returned at the jump.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> problem = invimbed.BolzaProblem(lambda t, z, th: 0.7 * z,
    ...                                 terminal_loss=lambda z: 0.5 * (z[0] - 2.0) ** 2)
    >>> res = invimbed.optimal_depth(problem, [1.0], (-2.0, 0.0))
    >>> round(res.p, 5), round(float(-np.log(2.0) / 0.7), 5)   # Z(p) = exp(-0.7 p) = 2
    (-0.99021, -0.99021)
    """
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got {describe(problem)}")
    rng = as_float_array(p_range, "p_range")
    if rng.shape != (2,) or not np.all(np.isfinite(rng)):
        raise ValueError(f"`p_range` must be a pair (p_low, p_high) of finite depths, but got "
                         f"{describe(p_range)}")
    lo, hi = float(rng[0]), float(rng[1])
    if not lo < hi:
        raise ValueError(f"`p_range` must have p_low < p_high, but got ({lo}, {hi})")
    if hi > problem.q:
        raise ValueError(f"`p_range` must lie below q = {problem.q}, but p_high = {hi}")
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 2:
        raise ValueError(f"`n` must be an integer >= 2, but got {describe(n)}")
    grid = np.linspace(lo, hi, int(n))
    sweep = solve_imbedding(problem, x, grid, control=control, **solve_kwargs)
    counts = {"nfev": int(sweep.nfev), "nsolve": 1}
    values = _batch_mean(sweep.value)
    grads = _batch_mean(sweep.depth_grad)
    if not sweep.success:
        return DepthResult(p=np.nan, value=np.nan, depth_grad=np.nan, interior=False,
                           candidates=np.empty(0), candidate_values=np.empty(0), grid=grid,
                           grid_value=values, grid_depth_grad=grads, success=False, status=-1,
                           message=f"The sweep failed: {sweep.message}", **counts)

    def at(p: float) -> tuple[float, float]:
        res = solve_imbedding(problem, x, [p], control=control, **solve_kwargs)
        counts["nfev"] += int(res.nfev)
        counts["nsolve"] += 1
        if not res.success:
            raise _SolverFailure(res.message)
        return float(_batch_mean(res.value)[0]), float(_batch_mean(res.depth_grad)[0])

    cands: list[tuple[float, float, float, bool]] = []   # (p, J, dJ/dp, interior)
    if grads[0] > 0:
        cands.append((lo, values[0], grads[0], False))
    if grads[-1] < 0:
        cands.append((hi, values[-1], grads[-1], False))
    message = "Optimal depth found."
    try:
        for j in range(n - 1):
            g0, g1 = grads[j], grads[j + 1]
            if g0 == 0.0 and j > 0 and grads[j - 1] < 0 <= g1:
                cands.append((grid[j], values[j], 0.0, True))
            elif g0 < 0 < g1:
                root = brentq(lambda s: at(s)[1], grid[j], grid[j + 1],
                              xtol=xtol * max(1.0, abs(grid[j])), rtol=4 * np.finfo(float).eps)
                v, g = at(root)
                cands.append((root, v, g, True))
    except _SolverFailure as exc:
        message = f"A refining solve failed ({exc}); the grid minimum is returned."
        cands = []
    if not cands:   # flat J, or a failure: fall back to the grid minimum
        k = int(np.argmin(values))
        cands = [(grid[k], values[k], grads[k], 0 < k < n - 1)]
        if message == "Optimal depth found.":
            message = "dJ/dp has no sign change and no end is a minimum; grid minimum returned."
    cands.sort(key=lambda c: c[0])
    best = min(cands, key=lambda c: c[1])
    where = "inside the range" if best[3] else "at an end of the range (J monotone there)"
    if message == "Optimal depth found.":
        message = f"Optimal depth found {where}."
    return DepthResult(p=float(best[0]), value=float(best[1]), depth_grad=float(best[2]),
                       interior=bool(best[3]), candidates=np.array([c[0] for c in cands]),
                       candidate_values=np.array([c[1] for c in cands]),
                       grid=grid, grid_value=values, grid_depth_grad=grads,
                       success=True, status=0, message=message, **counts)


def _batch_mean(a: np.ndarray) -> np.ndarray:
    """Mean over the batch axis of an (n,) or (n, B) array."""
    a = np.asarray(a, dtype=float)
    return a if a.ndim == 1 else a.mean(axis=1)
