"""The check the solvers make of user derivatives at their first point.

`BolzaProblem.check_shapes` calls `verify_user_derivatives` once per state and control
size when the problem was built with a dict of derivative callables. It lives apart from
`invimbed.check_derivatives` (the public, reporting check) so that the problem module
does not import the check module, which imports the problem.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import DerivativeProvider, derivative_name

#: Tolerance of :func:`verify_user_derivatives` on its scale-aware error.
GUARD_TOL = 1e-3
#: Relative steps it tries, in this order; it stops at the first that settles every entry.
GUARD_STEPS = (1e-3, 1e-2, 3e-2, 1e-4)
#: Safety factor on its allowance for the rounding and difference noise of the quotients.
GUARD_NOISE = 100.0
_FUNCTION_NAMES = {"f": "dynamics", "R": "running_loss", "T": "terminal_loss"}


def verify_user_derivatives(problem: Any, t: float, x: np.ndarray,
                            theta: np.ndarray) -> None:
    r"""Check the derivatives a user gave in ``derivatives=`` once, at one point.

    Called by `BolzaProblem.check_shapes` at a solve's first point, ``(t, x[0],
    theta)``, when the problem was built with a dict of derivative callables and
    ``check_derivatives=True``. Each user derivative ``D`` is compared, as in
    `invimbed.check_derivatives`, with fourth-order central differences ``D_h`` of its
    parent(s) from the problem's provider; an entry passes when

    .. math::

        |D - D_h| \le \mathrm{tol} \, S + \nu_h

    for some step ``h`` in `GUARD_STEPS` (relative, times ``max(1, |u_j|)``), with
    ``D_h`` the central quotient or, where the function has a kink at the point, a
    one-sided quotient of second order. ``S`` is the largest ``|D_h|`` over the
    differenced axis (the derivatives of the same parent entry: an entry near zero is
    judged on the scale of its row, not alone), ``tol`` is `GUARD_TOL` (1e-3) and
    ``nu_h = GUARD_NOISE * 4 (eps max|P| + e_P) / h`` allows for the rounding of the
    parent values ``P`` and, for a parent itself obtained by differences, for its
    estimated error ``e_P``. Correct derivatives show errors of about ``1e-9`` (exact
    parents) to ``1e-6`` (parents by differences); a transposed, sign-flipped or
    incomplete derivative shows an error of order one. Entries whose values or
    quotients are not finite cannot be judged and pass; a derivative that cannot be
    evaluated (a wrong shape, an exception) is left to the solver, which reports it.

    Parameters
    ----------
    problem : BolzaProblem
        The problem whose derivative callables (``problem.known_derivatives``) are checked.
    t : float
        The time of the point (``problem.q`` for the terminal loss).
    x : ndarray, shape (B, N)
        The states; the first row is used.
    theta : ndarray, shape (M,)
        The control values there.

    Raises
    ------
    ValueError
        Naming each wrong derivative (the ones whose own parents pass), its error, the
        entry and the values there; derivatives checked against a wrong one are named as
        failing too.
    """
    keys = sorted(problem.known_derivatives, key=lambda k: (k[1] + k[2], "fRT".index(k[0]), k[2]))
    if not keys:
        return
    z = np.asarray(x, dtype=float)[:1]
    th = np.asarray(theta, dtype=float).reshape(1, -1)
    prov = problem.provider(z.shape[1], th.shape[1])
    failures: dict[tuple[str, int, int], dict[str, Any]] = {}
    for key in keys:
        which, dz, dth = key
        t_w = problem.q if which == "T" else t
        try:
            with np.errstate(all="ignore"):
                D = np.asarray(prov.derivative(which, t_w, z, th, dz, dth), dtype=float)
        except Exception:   # a wrong shape or a failing call: the solver reports it
            continue
        for var, parent in (("z", (dz - 1, dth)), ("theta", (dz, dth - 1))):
            if min(parent) < 0:
                continue
            try:
                res = _guard_compare(prov, which, t_w, z, th, parent, var, D)
            except Exception:   # e.g. a parent beyond the differences' reach
                continue
            if res is not None and (key not in failures
                                    or res["error"] > failures[key]["error"]):
                res["parent"] = (which,) + parent
                res["var"] = var
                failures[key] = res
    if not failures:
        return
    suspects = [k for k in failures
                if not any(o != k and o[0] == k[0] and o[1] <= k[1] and o[2] <= k[2]
                           for o in failures)]
    others = [k for k in failures if k not in suspects]
    where = (f"t = {t:.6g}, x[0] = {_fmt(z[0])}"
             + (f", theta = {_fmt(th[0])}" if th.shape[1] else ""))
    parts = []
    for key in suspects:
        r = failures[key]
        parent = r["parent"]
        if parent[1:] == (0, 0):
            of = f"`{_FUNCTION_NAMES[parent[0]]}`"
        elif parent in problem.known_derivatives:
            of = f"`derivatives[{derivative_name(*parent)!r}]`"
        else:
            of = f"{derivative_name(*parent)} (itself from differences)"
        entry = list(r["index"][1:])
        parts.append(
            f"`derivatives[{derivative_name(*key)!r}]` does not match finite differences of "
            f"{of} in {r['var']}: relative error {r['error']:.2g} (tolerance {GUARD_TOL:g}); its entry "
            f"{entry} is {r['value']:.6g} where differences give {r['fd_value']:.6g}")
    text = "; ".join(parts)
    if others:
        text += (". Checked against these, " + ", ".join(f"`derivatives[{derivative_name(*k)!r}]`"
                                                           for k in others)
                 + " fail too")
    raise ValueError(f"user derivatives checked at the first point ({where}): {text}. Fix "
                     f"{'it' if len(suspects) == 1 else 'them'}, or pass "
                     f"check_derivatives=False to BolzaProblem to skip this check")


def _fmt(a: np.ndarray) -> str:
    a = np.asarray(a, dtype=float).ravel()
    items = [f"{v:.6g}" for v in a] if a.size <= 8 else \
        [f"{v:.6g}" for v in a[:3]] + ["..."] + [f"{v:.6g}" for v in a[-3:]]
    return "[" + ", ".join(items) + "]"


def _guard_compare(prov: DerivativeProvider, which: str, t: float, z: np.ndarray,
                   th: np.ndarray, parent: tuple[int, int], var: str,
                   D: np.ndarray) -> dict[str, Any] | None:
    """Differences of ``parent`` in ``var`` against ``D`` (one point, ``B = 1``); None
    where every entry passes, else the worst entry (see `verify_user_derivatives`)."""
    if D.size == 0:
        return None
    u = z if var == "z" else th
    n = u.shape[1]
    out_nd = len(prov.out_shape(which))
    pz, pt = parent
    axis = 1 + out_nd + pz if var == "z" else D.ndim - 1       # the differenced axis of D
    with np.errstate(all="ignore"):
        P0 = np.asarray(prov.derivative(which, t, z, th, pz, pt), dtype=float)   # (1, *S)
        err_p = np.zeros_like(P0)
        levels = getattr(prov, "fd_levels", None)
        if levels is not None and levels(which, pz, pt) > 0:
            err_p = np.asarray(prov.derivative_error(which, t, z, th, pz, pt), dtype=float)
    err_p = np.expand_dims(np.where(np.isfinite(err_p), err_p, 0.0), axis)
    eps = np.finfo(float).eps
    unjudged = ~np.isfinite(D)           # entries that pass for want of a judgement
    passed = unjudged.copy()
    judged = np.zeros(D.shape, dtype=bool)
    best = np.full(D.shape, np.inf)      # the smallest scale-aware error seen per entry
    best_central = np.full(D.shape, np.inf)
    best_fd = np.full(D.shape, np.nan)  # the central quotient closest to D
    shifts = np.array([2.0, 1.0, -1.0, -2.0])
    eye = np.eye(n)
    for h_rel in GUARD_STEPS:
        h = h_rel * np.maximum(1.0, np.abs(u))                       # (1, n)
        pts = (u[None, None] + shifts[:, None, None, None]
               * (h.T[None, :, :, None] * eye[None, :, None, :])).reshape(-1, n)
        if var == "z":
            zz, tt = pts, np.tile(th, (4 * n, 1))
        else:
            zz, tt = np.tile(z, (4 * n, 1)), pts
        with np.errstate(all="ignore"):
            vals = np.asarray(prov.derivative(which, t, zz, tt, pz, pt), dtype=float)
            vals = vals.reshape((4, n, 1) + vals.shape[1:])
            hb = h.T.reshape((n, 1) + (1,) * (vals.ndim - 3))
            quotients = [(-vals[0] + 8 * vals[1] - 8 * vals[2] + vals[3]) / (12 * hb),
                         (-3 * P0[None] + 4 * vals[1] - vals[0]) / (2 * hb),     # forward
                         (3 * P0[None] - 4 * vals[2] + vals[3]) / (2 * hb)]      # backward
            quotients = [np.moveaxis(np.moveaxis(d, 0, -1), -1, axis) for d in quotients]
            central = quotients[0]
            S = np.max(np.where(np.isfinite(central), np.abs(central), 0.0), axis=axis,
                       keepdims=True)
            pmax = np.maximum(np.max(np.abs(np.nan_to_num(vals, nan=0.0, posinf=0.0,
                                                          neginf=0.0)), axis=(0, 1)),
                              np.abs(np.nan_to_num(P0, nan=0.0, posinf=0.0, neginf=0.0)))
            pmax = np.expand_dims(pmax, axis)
            h_ax = h.reshape((1,) * axis + (n,) + (1,) * (D.ndim - axis - 1))
            noise = GUARD_NOISE * 4.0 * (eps * pmax + err_p) / h_ax
            denominator = S + noise / GUARD_TOL
            for k, d in enumerate(quotients):
                ok_d = np.isfinite(d)
                judged |= ok_d
                err = np.where(ok_d, np.abs(D - d), np.inf)
                err = np.where(err == 0, 0.0, err / np.where(denominator > 0, denominator,
                                                              np.finfo(float).tiny))
                best = np.minimum(best, err)
                if k == 0:
                    closer = err < best_central
                    best_central = np.where(closer, err, best_central)
                    best_fd = np.where(closer, d, best_fd)
                passed |= err <= GUARD_TOL
        if passed.all():
            return None
    failing = judged & ~passed
    if not failing.any():
        return None
    worst = np.where(failing, best, -np.inf)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(worst)), D.shape))
    return {"error": float(best[idx]), "index": idx, "value": float(D[idx]),
            "fd_value": float(best_fd[idx])}

