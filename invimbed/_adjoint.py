"""The classical reference: forward solve and backward adjoint, one depth at a time.

For each depth ``p_i`` separately (DESIGN.md section 4): integrate ``z`` (and the running
loss) forward from ``p_i`` to ``q``; then the adjoint
``d lambda/dt = -([grad_z f]^T lambda + grad_z R)``, ``lambda(q) = grad T(z(q))``, and the
parameter adjoint ``d mu/dt = -([grad_w f]^T lambda + grad_w R)``, ``mu(q) = 0``,
backward from ``q`` to ``p_i`` (eq. lam-adjoint; Chen et al.'s augmented adjoint), with
``z(t)`` from the forward solve's dense output. Then ``J = int R + T(z(q))``,
``grad_x J = lambda(p_i)``, ``dJ/dw = mu(p_i)`` and ``dJ/dp = -(lambda(p_i) . f + R)``
at ``t = p_i``.

It shares nothing with the imbedding closures beyond the problem and its derivative
provider: it is what the imbedding sweep is verified against.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.integrate import solve_ivp

from ._integrators import SCIPY_METHODS
from ._integrators.common import segments
from ._problem import BolzaProblem
from ._results import ImbeddingResult
from ._setup import Setup, depth_gradient, pack_result, prepare


def solve_adjoint(problem: BolzaProblem, x: Any, depths: Any, *, control: Any = None,
                  method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
                  **options: Any) -> ImbeddingResult:
    """Reference solution by the classical adjoint method, each depth separately.

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
    depths : array_like, shape (n,)
        Strictly monotone depths ``p_i <= q``.
    control : Constant, PiecewiseConstant, Control or None
    method : str, default "RK45"
        Any ``scipy.integrate.solve_ivp`` method.
    rtol, atol : float
        Tolerances of the forward and backward solves.
    **options
        Passed to ``solve_ivp``.

    Returns
    -------
    ImbeddingResult
        The same fields as `solve_imbedding` (``error_estimate`` is None). The work
        grows linearly with the number of depths: one forward and one backward solve each.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> problem = invimbed.BolzaProblem(lambda t, z, th: 0.7 * z,
    ...                                 terminal_loss=lambda z: 0.5 * z @ z)
    >>> res = invimbed.solve_adjoint(problem, [1.3], [-1.0], rtol=1e-10, atol=1e-12)
    >>> round(float(res.depth_grad[0]), 3)   # exact: -0.7 * 1.3**2 * exp(1.4)
    -4.797
    """
    setup = prepare(problem, x, depths, control, method, rtol, atol, None, SCIPY_METHODS)
    B, N = setup.x.shape
    nw = setup.control.n_params
    n = setup.depths_desc.size
    fields = {"z": np.full((n, B, N), np.nan), "value": np.full((n, B), np.nan),
              "adjoint": np.full((n, B, N), np.nan), "param_grad": np.full((n, B, nw), np.nan),
              "depth_grad": np.full((n, B), np.nan)}
    nfev = 0
    success, message = True, "The adjoint solves reached every requested depth."
    for i, p in enumerate(setup.depths_desc):
        ok, msg, out, count = _one_depth(setup, float(p), method, rtol, atol, options)
        nfev += count
        if not ok:
            success, message = False, msg
            break
        for k, v in out.items():
            fields[k][i] = v
        fields["depth_grad"][i] = depth_gradient(setup, float(p), out["adjoint"])
        if not np.all(np.isfinite(fields["depth_grad"][i])):
            success = False
            message = f"Non-finite depth gradient at depth p = {p:.10g}."
            break
    return pack_result(setup, fields, success=success, message=message, nfev=nfev,
                       closure="adjoint", method=method)


def _one_depth(setup: Setup, p: float, method: str, rtol: float, atol: float,
               options: dict) -> tuple[bool, str, dict, int]:
    prov = setup.provider
    ctrl = setup.control
    q = setup.q
    B, N = setup.x.shape
    M, nw = ctrl.size, ctrl.n_params
    nfev = 0
    if p == q:
        z = setup.x
        lam = prov.derivative("T", q, z, None, dz=1)
        return True, "", {"z": z.copy(), "value": prov.derivative("T", q, z, None),
                          "adjoint": lam, "param_grad": np.zeros((B, nw))}, 0
    segs = segments(q, p, ctrl.breakpoints)[::-1]  # forward in t: from p up to q
    dense = []
    y = np.concatenate([setup.x.ravel(), np.zeros(B)])

    def bad(where: str, t: float) -> tuple[bool, str, dict, int]:
        return (False, f"{where} failed for depth p = {p:.10g} at t = {t:.10g}: non-finite "
                f"value or solver failure", {}, nfev)

    for hi, lo in segs:
        piece = setup.piece_of(hi, lo)

        def forward(t, yy, piece=piece):
            z = yy[:B * N].reshape(B, N)
            th = np.broadcast_to(ctrl.theta(t, piece), (B, M))
            f = prov.derivative("f", t, z, th)
            r = prov.derivative("R", t, z, th)
            return np.concatenate([f.ravel(), r])

        sol = solve_ivp(forward, (lo, hi), y, method=method, rtol=rtol, atol=atol,
                        dense_output=True, **options)
        nfev += sol.nfev
        if sol.status != 0 or not np.all(np.isfinite(sol.y)):
            return bad("forward solve", float(sol.t[-1]))
        dense.append((lo, hi, sol.sol, piece))
        y = sol.y[:, -1]
    zq = y[:B * N].reshape(B, N)
    value = y[B * N:] + prov.derivative("T", q, zq, None)
    lam = prov.derivative("T", q, zq, None, dz=1)
    mu = np.zeros((B, nw))
    yb = np.concatenate([lam.ravel(), mu.ravel()])
    for lo, hi, sol_z, piece in reversed(dense):

        def backward(t, yy, sol_z=sol_z, piece=piece):
            z = sol_z(t)[:B * N].reshape(B, N)
            th = np.broadcast_to(ctrl.theta(t, piece), (B, M))
            lm = yy[:B * N].reshape(B, N)
            A = prov.derivative("f", t, z, th, dz=1)
            rz = prov.derivative("R", t, z, th, dz=1)
            dl = -(np.einsum("bji,bj->bi", A, lm) + rz)
            if nw:
                J = ctrl.jacobian(t, piece)
                G = prov.derivative("f", t, z, th, dth=1) @ J
                rw = prov.derivative("R", t, z, th, dth=1) @ J
                dm = -(np.einsum("biw,bi->bw", G, lm) + rw)
                return np.concatenate([dl.ravel(), dm.ravel()])
            return dl.ravel()

        sol = solve_ivp(backward, (hi, lo), yb, method=method, rtol=rtol, atol=atol, **options)
        nfev += sol.nfev
        if sol.status != 0 or not np.all(np.isfinite(sol.y)):
            return bad("backward adjoint solve", float(sol.t[-1]))
        yb = sol.y[:, -1]
    return True, "", {"z": zq, "value": value, "adjoint": yb[:B * N].reshape(B, N),
                      "param_grad": yb[B * N:].reshape(B, nw)}, nfev
