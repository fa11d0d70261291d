"""The sweep's own feedback, and the closed-loop check of `solve_optimal`.

The HJB sweep knows the feedback ``Psi(t, x + delta)`` as a Taylor polynomial of degree
``K`` in ``delta`` around the input ``x`` at every depth it passes (the feedback's jet,
docs/optimal-control.md, "The feedback's jet"); the Riccati path knows it exactly, affine
in ``delta``. `SweepFeedback` holds those polynomials on a grid of depths from the
deepest requested one to ``q`` and evaluates ``u(t, z)`` anywhere in between (cubic
splines in ``t``, the polynomial in ``z - x``, projected onto the control bounds).

`check_closed_loop` simulates that feedback from ``(p_i, x)`` to ``q`` for every requested
depth (`invimbed._control.simulate.run_rows`, the exact ensemble) and compares the true
cost ``J`` with the sweep's value ``V``: a depth where they differ by more than the
tolerance is not converged (docs/optimal-control.md, "Closed loop").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.derivatives.multiindex import multi_indices
from .._core.integrators import FIXED_METHODS, SCIPY_METHODS
from .._core.integrators.schedule import fixed_schedule
from .._core.results.results import SolverWarning
from .._core.results.status import Status
from .simulate import run_rows

#: Depths of the grid on which the feedback's polynomials are kept (plus the requested
#: depths and ``q``), spread evenly over ``[min(depths), q]``.
GRID_SIZE = 64


def feedback_grid(setup: Any, method: str, step: float | None,
                  size: int | None = None) -> np.ndarray:
    """Depths, descending, at which the sweep keeps its feedback: ``size`` (default
    `GRID_SIZE`) spread over ``[p_min, q]``, half evenly and half clustered towards ``q``
    (quadratically), where value functions change fastest (a value settles as the
    horizon grows), plus ``q`` and the requested depths. A fixed-step sweep takes them
    from its own step ends, so that they do not change its grid."""
    size = GRID_SIZE if size is None else size
    q, p_min = setup.q, float(setup.depths_desc[-1])
    if method in FIXED_METHODS:
        sched = fixed_schedule(q, setup.depths_desc, np.empty(0), setup.piece_of, method, step)
        ends = np.asarray(sched.p_end, dtype=float)
        pick = ends[np.unique(np.linspace(0, ends.size - 1, min(size, ends.size)).astype(int))] \
            if ends.size else ends
    else:
        half = max(2, size // 2)
        pick = np.concatenate([np.linspace(p_min, q, half),
                               q - (q - p_min) * np.linspace(0.0, 1.0, half) ** 2])
    return np.unique(np.concatenate([pick, setup.depths_desc, [q]]))[::-1]


class SweepFeedback:
    """``u(t, z)``: the feedback of a `solve_optimal` sweep, for ``t`` in ``[p_min, q]``.

    The result's ``policy``. It is the sweep's ``Psi(t, x + delta)``, a polynomial of
    degree ``K`` (the jet order; 1 on the Riccati path, where it is exact) in
    ``delta = z - x`` around the sweep's input ``x``, its coefficients interpolated in
    ``t`` by cubic splines between the depths of a grid, and projected onto the control
    bounds. Far from ``x`` the polynomial is an extrapolation: `check_closed_loop` (and
    `invimbed.simulate`) measure what it achieves.

    Call it as ``policy(t, z)`` with ``t`` a float or an array broadcastable to (k,)
    (e.g. (k, 1)), ``z`` of shape (k, N), returning (k, M); with a batch of inputs
    (B > 1) give ``inputs`` (k,), the index of the input whose expansion each row uses.

    Attributes
    ----------
    times : ndarray, shape (G,)
        The grid depths, ascending.
    coefficients : ndarray, shape (G, B, M, C)
        The polynomial coefficients (graded monomials of degree <= K in N variables).
    inputs : ndarray, shape (B, N)
        The expansion points ``x``.
    order : int
    bounds : ndarray, shape (M, 2), or None
    """

    def __init__(self, times: np.ndarray, coefficients: np.ndarray, inputs: np.ndarray,
                 order: int, bounds: np.ndarray | None = None) -> None:
        keep = np.all(np.isfinite(coefficients.reshape(coefficients.shape[0], -1)), axis=1)
        self.times = np.asarray(times, dtype=float)[keep]
        self.coefficients = coefficients[keep]
        self.inputs = np.asarray(inputs, dtype=float)
        self.order = int(order)
        self.bounds = bounds
        self._exponents = multi_indices(self.inputs.shape[1], self.order)
        G = self.times.size
        flat = self.coefficients.reshape(G, -1)
        # imported here, where a feedback is built: scipy.interpolate is the one part of
        # scipy that `import invimbed` would load for this class alone (about 0.05 s)
        from scipy.interpolate import CubicSpline, make_interp_spline

        if G >= 4:
            self._spline = CubicSpline(self.times, flat, axis=0)
        elif G >= 2:
            self._spline = make_interp_spline(self.times, flat, k=1, axis=0)
        else:
            self._spline = None

    def __repr__(self) -> str:
        span = (f"[{self.times[0]:.6g}, {self.times[-1]:.6g}]" if self.times.size
                else "(no depth reached)")
        return (f"SweepFeedback(t in {span}, {self.times.size} grid depths, "
                f"degree {self.order} in z - x, {self.inputs.shape[0]} input(s))")

    def __call__(self, t: Any, z: Any, inputs: Any = None) -> np.ndarray:
        z = np.atleast_2d(np.asarray(z, dtype=float))
        k, N = z.shape
        B, M = self.inputs.shape[0], self.coefficients.shape[2]
        if N != self.inputs.shape[1]:
            raise ValueError(f"`z` must have shape (k, {self.inputs.shape[1]}), but got "
                             f"shape {z.shape}")
        if inputs is None:
            if B != 1:
                raise ValueError(f"this feedback expands around {B} inputs: give `inputs` "
                                 f"(k,), the input of each row")
            inputs = np.zeros(k, dtype=np.int64)
        inputs = np.broadcast_to(np.asarray(inputs, dtype=np.int64), (k,))
        if self.times.size == 0:
            raise ValueError("the sweep reached no depth: it has no feedback to evaluate")
        t = np.broadcast_to(np.asarray(t, dtype=float).reshape(-1), (k,))
        lo, hi = self.times[0], self.times[-1]
        slack = 1e-9 * max(1.0, abs(lo), abs(hi))
        if np.any(t < lo - slack) or np.any(t > hi + slack):
            raise ValueError(f"the sweep's feedback is known for t in [{lo:.10g}, {hi:.10g}] "
                             f"(the depths it reached), but was asked at t = "
                             f"{t[(t < lo - slack) | (t > hi + slack)][0]:.10g}")
        if self._spline is None:
            coef = np.broadcast_to(self.coefficients[0], (k,) + self.coefficients.shape[1:])
        else:
            coef = self._spline(np.clip(t, lo, hi)).reshape((k,) + self.coefficients.shape[1:])
        coef = coef[np.arange(k), inputs]                               # (k, M, C)
        delta = z - self.inputs[inputs]
        powers = np.prod(delta[:, None, :] ** self._exponents[None], axis=2)   # (k, C)
        u = np.einsum("kmc,kc->km", coef, powers)
        if self.bounds is not None:
            u = np.clip(u, self.bounds[:, 0], self.bounds[:, 1])
        return u.reshape(k, M)


def check_closed_loop(res: Any, setup: Any, policy: SweepFeedback, method: str, rtol: float,
                      atol: float, options: dict) -> Any:
    """Simulate ``policy`` from ``(p_i, x)`` for every requested depth and compare the
    true cost with the sweep's value; returns the draft ``res`` with ``closed_loop_value``
    (NaN where the sweep gave no value), ``converged``, and ``success``, ``status``,
    ``message`` and ``warnings`` where the two differ by more than the tolerance
    (`Accuracy.scale` of ``setup.accuracy``: its ``tol``, or 10% of ``max(1, |V|)``)."""
    B, N = setup.x.shape
    n = setup.depths.size
    V = np.asarray(res.value, dtype=float).reshape(n, B)
    J = np.full((n, B), np.nan)
    rows = np.flatnonzero(np.isfinite(V).ravel())
    why: dict[int, str] = {}
    if rows.size and policy.times.size:
        t0 = np.repeat(setup.depths, B)[rows]
        which = rows % B
        t0 = np.maximum(t0, policy.times[0])

        def theta_of(t, z, r, piece):
            return policy(t, z, which[r])

        opts = {k: v for k, v in options.items() if k in ("first_step", "max_step", "max_steps")}
        out = run_rows(setup.provider, setup.q, t0, setup.x[which], theta_of,
                       method=method if method in SCIPY_METHODS else "RK45", rtol=rtol,
                       atol=atol, options=opts)
        J.ravel()[rows] = out["cost"]
        for j, r in enumerate(rows):
            if out["reason"][j] is not None:
                why[int(r)] = (f"does not reach q: the simulation failed at t = "
                               f"{out['t_end'][j]:.6g} ({out['reason'][j]})")
    with np.errstate(invalid="ignore"):
        ratio = np.abs(J - V) / setup.accuracy.scale(V)
    reached = np.isfinite(V)
    refused = reached & ~(ratio <= 1.0)                  # NaN J (a failed loop): refused
    shape = (n, B) if setup.batched else (n,)
    converged = res.get("converged")
    ok = ~refused
    res = res.but(closed_loop_value=J.reshape(shape), converged=(
        ok if converged is None else np.asarray(converged, dtype=bool).reshape(n, B) & ok
    ).reshape(shape))
    if not np.any(refused):
        return res
    i, b = np.argwhere(refused)[0]
    p = float(setup.depths[i])
    inp = f" and input x[{b}]" if setup.batched else ""
    crit = setup.accuracy.criterion("V")
    detail = why.get(int(i * B + b), f"costs J = {J[i, b]:.10g}, |J - V| = "
                                     f"{ratio[i, b]:.3g} times {crit}")
    text = (f"Closed-loop check failed at depth p = {p:.10g}{inp}: the sweep's value is "
            f"V = {V[i, b]:.10g}, but its own feedback, simulated from x, {detail}. "
            f"{int(refused.sum())} of {int(reached.sum())} (depth, input) pairs differ; "
            f"V is not the cost of a feedback there (raise `order`, request shallower "
            f"depths, or use a direct method such as optimize_control).")
    res = res.but(warnings=res.warnings + [SolverWarning("closed_loop_mismatch", text, depth=p)])
    if res.success:
        res = res.but(success=False, status=Status.NOT_CONVERGED, message=text)
    return res


def policy_from_outcome(outcome: Any, jet_at: Any, inputs: np.ndarray, order: int,
                        bounds: np.ndarray | None = None) -> SweepFeedback | None:
    """The `SweepFeedback` of a sweep integrated with a ``grid`` (`sweep.integrate`):
    ``jet_at(p, y)`` gives the feedback's coefficients (B, M, C) at a grid state; the
    grid ends at the first depth not reached (or where ``jet_at`` fails). None without a
    grid."""
    if "grid" not in outcome.extra:
        return None
    grid, ys = outcome.extra["grid"]
    rows = []
    for p, y in zip(grid, ys):            # descending, from q
        if not np.all(np.isfinite(y)):
            break
        try:
            rows.append((float(p), np.asarray(jet_at(float(p), y), dtype=float)))
        except ArithmeticError:
            break
    B, N = inputs.shape
    if not rows:
        M = 1 if bounds is None else bounds.shape[0]
        return SweepFeedback(np.empty(0), np.empty((0, B, M, 1)), inputs, order, bounds)
    times = np.array([p for p, _ in rows])[::-1]
    coef = np.stack([c for _, c in rows])[::-1]
    return SweepFeedback(times, coef, inputs, order, bounds)
