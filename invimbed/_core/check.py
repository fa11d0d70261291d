"""Check a problem's derivatives against finite differences of themselves.

In the spirit of ``scipy.optimize.check_grad`` and ``torch.autograd.gradcheck``:
:func:`check_derivatives` takes every derivative the problem's provider gives and
compares it with central differences of the derivative one order below, from the same
provider. Hand-written derivative callables with a typo, a wrong axis order or a
missing term show up as an error of order one on the derivative concerned.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import OptimizeResult

from .controls import OpenLoopControl, as_control
from .derivatives import DerivativeOrderError, DerivativeProvider
from .problem import BolzaProblem
from .validation import as_float_array, as_state, describe, require_finite

#: Relative steps of the difference quotients; the smallest error over them is kept.
STEPS = (3e-2, 1e-2, 1e-3, 1e-4)
#: Default tolerance on the reported error (see :func:`check_derivatives`).
TOL = 1e-4


class DerivativeCheck(OptimizeResult):
    """Result of :func:`check_derivatives`: a dict with attribute access.

    Attributes
    ----------
    ok : bool
        Whether every checked derivative has ``error <= tol``.
    errors : dict
        ``{"f_z": error, "f_ztheta": error, ...}``: the worst error of each derivative
        over the points and entries (see :func:`check_derivatives` for its definition).
        A derivative computed from a wrong one (e.g. a finite-difference ``f_ztheta`` of
        a wrong ``f_z``) is wrong too and is reported as well; the culprit is the
        lowest wrong name in the chain.
    worst : str or None
        The name with the largest error.
    max_error : float
        That error.
    suspects : list of str
        The failing derivatives whose parents pass: the ones to fix first. A
        derivative checked against a wrong one fails too (``f_zz`` against a wrong
        ``f_z``) without being a suspect; rerun after fixing the suspects.
    details : dict
        Per name: ``parents`` (the derivatives differenced, and in which variable, to
        check it; the worse comparison is reported), ``index`` (the
        batch point and tensor entry of the worst error), ``value`` (the provider's
        entry there), ``fd_value`` (the difference quotient's), ``scale``, ``step``.
    skipped : list of str
        Derivatives above the provider's order limit, not checked.
    tol : float
        The tolerance used for ``ok``.
    provider : str
        Which provider was checked.
    """

    def __repr__(self) -> str:
        head = (f"check_derivatives: {self.provider}, {self.n_points} point(s), "
                f"tol={self.tol:.1e}")
        rows = [("derivative", "differences of", "error", "ok")]
        for name, err in self.errors.items():
            parents = ", ".join(self.details[name]["parents"])
            rows.append((name, parents, f"{err:.2e}",
                         "yes" if err <= self.tol else "NO"))
        widths = [max(len(r[c]) for r in rows) for c in range(4)]
        lines = [head]
        for r in rows:
            lines.append("  " + "  ".join(r[c].ljust(widths[c]) for c in range(4)).rstrip())
        if self.skipped:
            lines.append(f"  not checked (above the provider's order limit): "
                         f"{', '.join(self.skipped)}")
        verdict = "ok" if self.ok else "FAILED"
        worst = f" (worst: {self.worst}, {self.max_error:.2e})" if self.worst else ""
        lines.append(f"{verdict}{worst}")
        if self.suspects:
            lines.append(f"suspects (failing, checked against derivatives that pass): "
                         f"{', '.join(self.suspects)}")
        return "\n".join(lines)

    __str__ = __repr__


def check_derivatives(problem: BolzaProblem | DerivativeProvider, x: Any, theta: Any = None,
                      *, control: Any = None, t: float | None = None, order: int = 2,
                      tol: float = TOL) -> DerivativeCheck:
    r"""Compare every derivative of a problem with finite differences.

    For each of ``f``, ``R``, ``T`` and each derivative ``(dz, dth)`` with
    ``1 <= dz + dth <= order`` and ``dth <= 1`` (``dth = 0`` for ``T``), the tensor
    ``D`` given by the provider of ``problem`` is compared with fourth-order central
    differences of its parent(s) from the same provider: ``f_zz`` with differences of
    ``f_z`` in ``z``, ``f_theta`` with differences of ``f`` in ``theta``, a mixed
    ``f_ztheta`` with both differences of ``f_z`` in ``theta`` and of ``f_theta`` in
    ``z`` (which also checks the axis order). Each derivative is therefore checked
    against the one below it, so the first wrong name in a chain is the culprit.

    The error of a derivative is

    .. math::

        \mathrm{err} = \min_h \frac{\max |D - D_h|}{\max(1, \max |D_h|)}

    over all points and tensor entries, ``D_h`` the difference quotient with relative
    step ``h`` in ``(3e-2, 1e-2, 1e-3, 1e-4)`` (times ``max(1, |u_j|)`` for coordinate
    ``u_j``):
    relative for large tensors, absolute for tensors of size below one, and from the
    step that suits the function best. With exact derivatives (user callables in closed
    form, sympy) errors are about ``1e-9`` or less; finite-difference providers show
    their own difference error, up to about ``1e-6`` at order 3 and ``5e-5`` at order 4
    (raise ``tol`` to check those); a wrong derivative shows an error of order one.

    Parameters
    ----------
    problem : BolzaProblem or DerivativeProvider
        The problem whose provider (``problem.provider(N, M)``) is checked, or a provider.
    x : array_like, shape (N,) or (B, N)
        The state(s) at which to check.
    theta : array_like, shape (M,) or (B, M), optional
        Control values ``theta`` (not the parameters of a control object). Give either
        ``theta`` or ``control``; neither means ``M = 0``.
    control : Constant, PiecewiseConstant or Control, optional
        An invimbed control, as the solvers take it: the check is made at its value
        ``theta(t)``.
    t : float, optional
        The time at which ``f`` and ``R`` are checked (and ``control`` is evaluated);
        default ``problem.q`` (0 for a provider).
    order : int, default 2
        Highest total order checked. Derivatives above the provider's order limit are
        listed in ``skipped``.
    tol : float, default 1e-4
        ``ok`` is ``True`` when every error is at most ``tol``.

    Returns
    -------
    DerivativeCheck
        ``ok``, ``errors`` (name -> error), ``worst``, ``max_error``, ``suspects``
        (the failing derivatives whose parents pass: fix these first), ``details``,
        ``skipped``, ``tol``, ``provider``; its repr is a table.

    Raises
    ------
    TypeError
        If ``problem`` is neither a BolzaProblem nor a DerivativeProvider, ``x``,
        ``theta``, ``t`` are not real numbers, ``control`` is not an invimbed control,
        or both ``theta`` and ``control`` are given.
    ValueError
        If the shapes of ``x`` and ``theta`` disagree (with each other or the provider),
        a value is not finite, ``order < 1`` or ``tol <= 0``.

    See Also
    --------
    scipy.optimize.check_grad, torch.autograd.gradcheck

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> from invimbed import check_derivatives
    >>> problem = invimbed.BolzaProblem(
    ...     lambda t, z, th: np.array([z[1], -np.sin(z[0]) + th[0]]),
    ...     terminal_loss=lambda z: 0.5 * z @ z,
    ...     derivatives={"f_z": lambda t, z, th: np.array([[0, 1], [np.cos(z[0]), 0]])})
    >>> res = check_derivatives(problem, [0.3, 0.1], [0.0])
    >>> res.ok, res.suspects   # the sign of cos is wrong
    (False, ['f_z'])
    >>> check_derivatives(problem, [0.3, 0.1], control=invimbed.Constant([0.0])).suspects
    ['f_z']
    """
    if isinstance(problem, BolzaProblem):
        prov = None
        zero = {w for w, fn in (("R", problem.running_loss), ("T", problem.terminal_loss))
                if fn is None}
        t_default = problem.q
    elif isinstance(problem, DerivativeProvider):
        prov = problem
        zero = set()
        t_default = 0.0
    else:
        raise TypeError("`problem` must be an invimbed.BolzaProblem or a DerivativeProvider, "
                        f"but got {describe(problem)}")
    n_state = prov.n_state if prov is not None else None
    xb, _ = as_state(x, n_state, "x")
    B, N = xb.shape
    if isinstance(theta, OpenLoopControl):
        raise TypeError("`theta` takes control values, shape (M,) or (B, M), but got the "
                        f"control object {describe(theta)}; pass it as `control=`")
    if control is not None:
        if theta is not None:
            raise TypeError("give either `theta` (control values) or `control` (a control "
                            "object), not both")
        ctrl = as_control(control)
    if t is None:
        t = t_default
    try:
        t = float(t)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`t` must be a real number, but got {describe(t)}") from exc
    if not np.isfinite(t):
        raise ValueError(f"`t` must be finite, but got {t}")
    if control is not None:
        theta = ctrl.theta(t)
    if theta is None:
        if prov is not None and prov.n_theta:
            raise ValueError(f"`theta` is required: the provider has M = {prov.n_theta} "
                             f"controls; give their values, shape (M,) or (B, M)")
        thb = np.zeros((B, 0))
    else:
        th = as_float_array(theta, "theta")
        if th.ndim == 1:
            th = np.broadcast_to(th, (B, th.size))
        if th.ndim != 2 or th.shape[0] != B:
            raise ValueError(f"`theta` must have shape (M,) or (B, M) with B = {B} (the batch "
                             f"of `x`), but got shape {np.shape(theta)}")
        require_finite(th, "theta")
        thb = np.array(th, dtype=float)
    M = thb.shape[1]
    if prov is not None and M != prov.n_theta:
        raise ValueError(f"`theta` must have M = {prov.n_theta} entries (the provider's), but "
                         f"got shape {thb.shape}")
    if not isinstance(order, (int, np.integer)) or isinstance(order, bool) or order < 1:
        raise ValueError(f"`order` must be an integer >= 1, but got {describe(order)}")
    try:
        tol = float(tol)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`tol` must be a positive number, but got {describe(tol)}") from exc
    if not tol > 0:
        raise ValueError(f"`tol` must be positive, but got {tol}")
    if prov is None:   # shapes only: this function reports, the solvers' check raises
        problem.check_shapes(t, xb, thb[0], derivatives=False)
        prov = problem.provider(N, M)

    errors: dict[str, float] = {}
    details: dict[str, dict] = {}
    skipped: list[str] = []
    for which in ("f", "R", "T"):
        if which in zero:
            continue
        t_w = problem.q if (which == "T" and isinstance(problem, BolzaProblem)) else t
        limit = prov.order_limit(which)
        for dz, dth in _requests(which, order, M):
            name = _name(which, dz, dth)
            if limit is not None and dz + dth > limit:
                skipped.append(name)
                continue
            try:
                D = prov.derivative(which, t_w, xb, thb, dz, dth)
            except DerivativeOrderError:
                skipped.append(name)
                continue
            best = None
            parents, parent_names = [], []
            for var, parent in (("z", (dz - 1, dth)), ("theta", (dz, dth - 1))):
                if min(parent) < 0:
                    continue
                parents.append(f"{_name(which, *parent)} in {var}")
                parent_names.append(_name(which, *parent))
                res = _compare(prov, which, t_w, xb, thb, parent, var, D)
                if best is None or not res["error"] <= best["error"]:
                    best = res   # the worse of the parents counts
            best["parents"] = parents
            best["parent_names"] = parent_names
            errors[name] = best["error"]
            details[name] = best
    worst = max(errors, key=lambda k: (np.nan_to_num(errors[k], nan=np.inf)), default=None)
    max_error = errors[worst] if worst is not None else 0.0
    ok = all(e <= tol for e in errors.values())
    suspects = [name for name, e in errors.items() if not e <= tol
                and all(errors.get(p, 0.0) <= tol for p in details[name]["parent_names"])]
    return DerivativeCheck(ok=bool(ok), errors=errors, worst=worst, max_error=float(max_error),
                           suspects=suspects, details=details, skipped=skipped, tol=tol,
                           provider=prov.name, n_points=B)


def _requests(which: str, order: int, M: int) -> list[tuple[int, int]]:
    out = [(dz, 0) for dz in range(1, order + 1)]
    if which != "T" and M:
        out += [(dz, 1) for dz in range(0, order)]
    return out


def _name(which: str, dz: int, dth: int) -> str:
    return which if dz + dth == 0 else f"{which}_{'z' * dz}{'theta' * dth}"


def _compare(prov: DerivativeProvider, which: str, t: float, z: np.ndarray, th: np.ndarray,
             parent: tuple[int, int], var: str, D: np.ndarray) -> dict[str, Any]:
    """Fourth-order central differences of ``parent`` in ``var``, moved to ``D``'s axes."""
    B = z.shape[0]
    u = z if var == "z" else th
    n = u.shape[1]
    out_nd = len(prov.out_shape(which))
    pz, pt = parent
    best: dict[str, Any] | None = None
    for h_rel in STEPS:
        h = h_rel * np.maximum(1.0, np.abs(u))                      # (B, n)
        shifts = np.array([2.0, 1.0, -1.0, -2.0])
        eye = np.eye(n)
        # points: (4, n, B, n) -> (4 n B, n)
        pts = u[None, None] + shifts[:, None, None, None] * (h.T[None, :, :, None]
                                                             * eye[None, :, None, :])
        pts = pts.reshape(-1, n)
        if var == "z":
            zz, tt = pts, np.tile(th, (4 * n, 1))
        else:
            zz, tt = np.tile(z, (4 * n, 1)), pts
        with np.errstate(all="ignore"):
            vals = prov.derivative(which, t, zz, tt, pz, pt)
            vals = vals.reshape((4, n, B) + vals.shape[1:])
            hb = h.T.reshape((n, B) + (1,) * (vals.ndim - 3))
            d = (-vals[0] + 8 * vals[1] - 8 * vals[2] + vals[3]) / (12 * hb)  # (n, B, *S)
        d = np.moveaxis(d, 0, -1)                                   # (B, *S, n)
        if var == "z":   # new z axis after the parent's z axes, before its theta axes
            d = np.moveaxis(d, -1, 1 + out_nd + pz)
        diff = np.abs(D - d)
        finite = np.isfinite(diff)
        scale = max(1.0, float(np.max(np.abs(d), where=np.isfinite(d), initial=0.0)))
        if diff.size == 0:
            err, idx = 0.0, ()
        elif not finite.all():
            err, idx = np.inf, tuple(int(i) for i in np.argwhere(~finite)[0])
        else:
            flat = int(np.argmax(diff))
            idx = tuple(int(i) for i in np.unravel_index(flat, diff.shape))
            err = float(diff[idx]) / scale
        if best is None or err < best["error"]:
            best = {"error": err, "index": idx, "step": h_rel, "scale": scale,
                    "value": float(D[idx]) if idx else float("nan"),
                    "fd_value": float(d[idx]) if idx else float("nan")}
    return best


# -- the check made by the solvers at their first point --------------------------------
#: Tolerance of :func:`verify_user_derivatives` on its scale-aware error.
GUARD_TOL = 1e-3
#: Relative steps it tries, in this order; it stops at the first that settles every entry.
GUARD_STEPS = (1e-3, 1e-2, 3e-2, 1e-4)
#: Safety factor on its allowance for the rounding and difference noise of the quotients.
GUARD_NOISE = 100.0
_FUNCTION_NAMES = {"f": "dynamics", "R": "running_loss", "T": "terminal_loss"}


def verify_user_derivatives(problem: BolzaProblem, t: float, x: np.ndarray,
                            theta: np.ndarray) -> None:
    r"""Check the derivatives a user gave in ``derivatives=`` once, at one point.

    Called by `BolzaProblem.check_shapes` at a solve's first point, ``(t, x[0],
    theta)``, when the problem was built with a dict of derivative callables and
    ``check_derivatives=True``. Each user derivative ``D`` is compared, as in
    :func:`check_derivatives`, with fourth-order central differences ``D_h`` of its
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

    Raises
    ------
    ValueError
        Naming each wrong derivative (the ones whose own parents pass), its error, the
        entry and the values there; derivatives checked against a wrong one are named as
        failing too.
    """
    keys = sorted(problem._known, key=lambda k: (k[1] + k[2], "fRT".index(k[0]), k[2]))
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
        elif parent in problem._known:
            of = f"`derivatives[{_name(*parent)!r}]`"
        else:
            of = f"{_name(*parent)} (itself from differences)"
        entry = list(r["index"][1:])
        parts.append(
            f"`derivatives[{_name(*key)!r}]` does not match finite differences of {of} in "
            f"{r['var']}: relative error {r['error']:.2g} (tolerance {GUARD_TOL:g}); its entry "
            f"{entry} is {r['value']:.6g} where differences give {r['fd_value']:.6g}")
    text = "; ".join(parts)
    if others:
        text += (". Checked against these, " + ", ".join(f"`derivatives[{_name(*k)!r}]`"
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
