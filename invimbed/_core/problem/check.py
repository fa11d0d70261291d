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

from .open_loop import OpenLoopControl, as_control
from ..derivatives import DerivativeOrderError, DerivativeProvider, derivative_name
from .bolza import BolzaProblem
from ..inputs.validation import as_int, as_float_array, as_real, as_state, describe, require_finite

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

    Each derivative of ``f``, ``R``, ``T`` up to total order ``order`` (at most one in
    ``theta``) is compared with fourth-order central differences of its parent from the
    same provider, so the first wrong name in a chain is the culprit. Exact derivatives
    show errors of about ``1e-9``, a wrong one an error of order one. The error measure
    and the steps: docs/derivatives.md, "check_derivatives in detail".

    Parameters
    ----------
    problem : BolzaProblem or DerivativeProvider
        The problem whose provider (``problem.provider(N, M)``) is checked, or a provider.
    x : array_like, shape (N,) or (B, N)
        The state(s) at which to check.
    theta : array_like, shape (M,) or (B, M), optional
        Control values (not a control's parameters); neither this nor ``control``: ``M = 0``.
    control : Constant, PiecewiseConstant or Control, optional
        An invimbed control: the check is made at its value ``theta(t)``.
    t : float, optional
        The time of ``f``, ``R`` and ``control``; default ``problem.q`` (0 for a provider).
    order : int, default 2
        Highest total order checked; those above the provider's limit are ``skipped``.
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
        Arguments of the wrong type, both ``theta`` and ``control``, an unknown keyword.
    ValueError
        Shapes that disagree (naming ``x``, ``theta`` or ``control``), a missing control,
        a non-finite value, ``order < 1`` or ``tol <= 0``.

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
    t = as_real(t, "t", allow_inf=True)
    if not np.isfinite(t):
        raise ValueError(f"`t` must be finite, but got {t}")
    given = "control" if control is not None else "theta"
    values_given = control is not None or theta is not None
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
    order = as_int(order, "order", minimum=1)
    if isinstance(tol, (bool, np.bool_, str, bytes)) or np.iscomplexobj(tol):
        raise TypeError(f"`tol` must be a positive number, but got {describe(tol)}")
    try:
        tol = float(tol)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`tol` must be a positive number, but got {describe(tol)}") from exc
    if not tol > 0:
        raise ValueError(f"`tol` must be positive, but got {tol}")
    if prov is None:   # shapes only: this function reports, the solvers' check raises
        problem.check_sizes(N, M, control=given, control_given=values_given)
        problem.check_shapes(t, xb, thb[0], derivatives=False, control=given)
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
            name = derivative_name(which, dz, dth)
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
                parents.append(f"{derivative_name(which, *parent)} in {var}")
                parent_names.append(derivative_name(which, *parent))
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
