"""The benchmark problem shared by the pendulum benchmarks (``bench_core.py``,
``bench_ensemble.py``, ``bench_user_styles.py`` and others; no benchmark imports another).

Two pendulums coupled by a spring (``N = 4`` states, ``M = 2`` torques):

    z = [phi1, phi2, omega1, omega2],   theta = u = [u1, u2],
    d phi_i / dt   = omega_i,
    d omega_1 / dt = -sin(phi1) - k (phi1 - phi2) - c omega1 + u1,
    d omega_2 / dt = -sin(phi2) - k (phi2 - phi1) - c omega2 + u2,
    R = a (2 - cos phi1 - cos phi2) + rho |u|^2 / 2,
    T = |z - z_target|^2 / 2.

``bench_core.py`` drives them by a constant torque ``U0`` and times
``vectorised_problem(exact)``: vectorised functions with every derivative up to order
three written by hand (``DERIVATIVES``; batch axis first, then the output axes, then the
``z`` axes, then the ``theta`` axes), or finite differences only; ``check_derivatives``
compares the two. The ensemble benchmarks drive them by a piecewise-constant torque on
four pieces of ``[-1, 0]``.

What it provides:

* ``make_problem(compile=None)``: the problem built with ``invimbed.from_sympy`` (exact
  derivatives of every order), ``q = 0``;
* ``CONTROL``: ``invimbed.PiecewiseConstant(knots=KNOTS, values=VALUES)``, ``KNOTS =
  linspace(-1, 0, 5)``; ``theta(t) = VALUES[k]`` for ``KNOTS[k] <= t < KNOTS[k+1]``
  (right-continuous, the last piece closed at 0), ``w = VALUES.ravel()`` (row-major);
* numpy vectorised callables of the same problem for tools that need them: ``f``, ``R``,
  ``T`` and ``f_z``, ``f_theta``, ``R_z``, ``R_theta``, ``T_z`` (``t`` scalar or ``(B,)``,
  ``z`` ``(B, 4)``, ``th`` ``(B, 2)``; output axes after the batch axis, then ``z``, then
  ``theta``), and ``theta_of(t)`` (the control at an array of times, same piece rule);
* ``depths(n)`` = ``linspace(0, -1, n)``;
* ``reference(n, x=X0, rtol=1e-11)``: the classical per-depth adjoint solve at tight
  tolerance (``atol = 1e-13``), cached per process;
* ``worst_rel_error(res, ref)``: the accuracy measure of the ensemble issue (below);
* ``fields_from(z, value, adjoint, param_grad)``: the five fields of another tool, with
  the depth gradient computed as ``-(adjoint . f(p, x, theta(p)) + R(p, x, theta(p)))``.

**Accuracy measure.** For each of the five fields ``z``, ``value``, ``adjoint``,
``param_grad``, ``depth_grad`` (arrays ``a`` of a result, ``b`` of the reference, same
shape), the field-normwise relative error, the measure of the issue's tables (and of
``rel_err`` in the tests):

    err(field) = max over entries of |a - b| / max(|b|, floor * max|b|),  floor = 1,

i.e. ``max|a - b| / max|b|``. ``worst_rel_error`` is the largest ``err(field)``; with
``per_field=True`` it returns the dict of the five. ``floor=ENTRYWISE_FLOOR`` (1e-8)
gives an entry-wise relative error instead: every entry is held to the same relative
standard, however small it is next to the field's largest (a state component crossing
zero), so that measure is set by such entries: at ``rtol = 1e-8`` the per-depth adjoint
itself is at ``~1e-4`` entry-wise and ``~2e-9`` normwise. The ensemble benchmark prints
both.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import numpy as np

import invimbed

K_SPRING = 0.5      # coupling spring
C_DAMP = 0.1        # damping
A_RUN = 0.2         # weight of the running loss on the angles
RHO = 0.05          # weight of the control effort
Z_TARGET = np.array([1.0, 1.0, 0.0, 0.0])
N, M = 4, 2

Q = 0.0
P_MIN = -1.0
X0 = np.array([0.8, -0.4, 0.3, 0.0])
U0 = np.array([0.2, -0.1])


# -- the problem: vectorised functions and exact derivatives (bench_core.py) ---------------
def f(t: float, z: np.ndarray, th: np.ndarray) -> np.ndarray:
    """Dynamics, z (B, 4), th (B, 2) -> (B, 4)."""
    p1, p2, w1, w2 = z.T
    return np.stack([
        w1,
        w2,
        -np.sin(p1) - K_SPRING * (p1 - p2) - C_DAMP * w1 + th[:, 0],
        -np.sin(p2) - K_SPRING * (p2 - p1) - C_DAMP * w2 + th[:, 1],
    ], axis=1)


def f_z(t, z, th):
    B = z.shape[0]
    out = np.zeros((B, N, N))
    out[:, 0, 2] = 1.0
    out[:, 1, 3] = 1.0
    out[:, 2, 0] = -np.cos(z[:, 0]) - K_SPRING
    out[:, 2, 1] = K_SPRING
    out[:, 2, 2] = -C_DAMP
    out[:, 3, 0] = K_SPRING
    out[:, 3, 1] = -np.cos(z[:, 1]) - K_SPRING
    out[:, 3, 3] = -C_DAMP
    return out


def f_zz(t, z, th):
    out = np.zeros((z.shape[0], N, N, N))
    out[:, 2, 0, 0] = np.sin(z[:, 0])
    out[:, 3, 1, 1] = np.sin(z[:, 1])
    return out


def f_zzz(t, z, th):
    out = np.zeros((z.shape[0], N, N, N, N))
    out[:, 2, 0, 0, 0] = np.cos(z[:, 0])
    out[:, 3, 1, 1, 1] = np.cos(z[:, 1])
    return out


def f_theta(t, z, th):
    out = np.zeros((z.shape[0], N, M))
    out[:, 2, 0] = 1.0
    out[:, 3, 1] = 1.0
    return out


def R(t, z, th):
    return A_RUN * (2.0 - np.cos(z[:, 0]) - np.cos(z[:, 1])) + 0.5 * RHO * np.sum(th ** 2, axis=1)


def R_z(t, z, th):
    out = np.zeros((z.shape[0], N))
    out[:, 0] = A_RUN * np.sin(z[:, 0])
    out[:, 1] = A_RUN * np.sin(z[:, 1])
    return out


def R_zz(t, z, th):
    out = np.zeros((z.shape[0], N, N))
    out[:, 0, 0] = A_RUN * np.cos(z[:, 0])
    out[:, 1, 1] = A_RUN * np.cos(z[:, 1])
    return out


def R_zzz(t, z, th):
    out = np.zeros((z.shape[0], N, N, N))
    out[:, 0, 0, 0] = -A_RUN * np.sin(z[:, 0])
    out[:, 1, 1, 1] = -A_RUN * np.sin(z[:, 1])
    return out


def T(z):
    return 0.5 * np.sum((z - Z_TARGET) ** 2, axis=1)


def _zeros(*shape: int) -> Callable:
    return lambda t, z, th: np.zeros((z.shape[0],) + shape)


DERIVATIVES: dict[str, Callable] = {
    "f_z": f_z, "f_zz": f_zz, "f_zzz": f_zzz,
    "f_theta": f_theta, "f_ztheta": _zeros(N, N, M), "f_zztheta": _zeros(N, N, N, M),
    "R_z": R_z, "R_zz": R_zz, "R_zzz": R_zzz,
    "R_theta": lambda t, z, th: RHO * th, "R_ztheta": _zeros(N, M), "R_zztheta": _zeros(N, N, M),
    "T_z": lambda z: z - Z_TARGET,
    "T_zz": lambda z: np.broadcast_to(np.eye(N), (z.shape[0], N, N)).copy(),
    "T_zzz": lambda z: np.zeros((z.shape[0], N, N, N)),
}


def vectorised_problem(exact: bool) -> invimbed.BolzaProblem:
    """The coupled pendulums with constant torques as `bench_core.py` times them:
    vectorised, with the hand-written derivatives or with finite differences only."""
    return invimbed.BolzaProblem(f, R, T, q=Q, vectorized=True,
                                 derivatives=DERIVATIVES if exact else "finite-differences")


def check_derivatives() -> float:
    """Largest difference between the hand-written derivatives and central differences
    at a random point (a guard against a wrong tensor)."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(3, N))
    th = rng.normal(size=(3, M))
    exact = vectorised_problem(True).provider(N, M)
    fd = vectorised_problem(False).provider(N, M)
    worst = 0.0
    for which, dz, dth in [("f", 1, 0), ("f", 2, 0), ("f", 3, 0), ("f", 0, 1), ("f", 1, 1),
                           ("R", 1, 0), ("R", 2, 0), ("R", 3, 0), ("R", 0, 1), ("R", 1, 1),
                           ("T", 1, 0), ("T", 2, 0), ("T", 3, 0)]:
        a = exact.derivative(which, 0.0, z, th, dz=dz, dth=dth)
        b = fd.derivative(which, 0.0, z, th, dz=dz, dth=dth)
        worst = max(worst, float(np.max(np.abs(a - b))))
    return worst


KNOTS = np.linspace(P_MIN, Q, 5)
VALUES = np.array([[0.2, -0.1],       # around U0, with variation from piece to piece
                   [0.5, 0.1],
                   [-0.1, 0.3],
                   [0.3, -0.2]])
W = VALUES.ravel()                    # the parameter vector, n_w = 8
N_W = W.size
CONTROL = invimbed.PiecewiseConstant(knots=KNOTS, values=VALUES)

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
ENTRYWISE_FLOOR = 1e-8     # floor of the entry-wise measure
REL_FLOOR = 1.0            # the default: field-normwise


# -- the problem, symbolic -----------------------------------------------------------------
def sympy_expressions() -> tuple[Any, list, list, list, Any, Any]:
    """``(t, z, theta, dynamics, running_loss, terminal_loss)`` as sympy objects."""
    import sympy as sp

    t = sp.Symbol("t")
    p1, p2, w1, w2 = z = list(sp.symbols("phi1 phi2 omega1 omega2"))
    u1, u2 = th = list(sp.symbols("u1 u2"))
    dynamics = [
        w1,
        w2,
        -sp.sin(p1) - K_SPRING * (p1 - p2) - C_DAMP * w1 + u1,
        -sp.sin(p2) - K_SPRING * (p2 - p1) - C_DAMP * w2 + u2,
    ]
    running = A_RUN * (2 - sp.cos(p1) - sp.cos(p2)) + RHO / 2 * (u1 ** 2 + u2 ** 2)
    terminal = sum((zi - float(zt)) ** 2 for zi, zt in zip(z, Z_TARGET)) / 2
    return t, z, th, dynamics, running, terminal


def make_problem(compile: str | None = None) -> invimbed.BolzaProblem:
    """The coupled pendulums from ``invimbed.from_sympy`` (``compile`` as there)."""
    t, z, th, dynamics, running, terminal = sympy_expressions()
    kwargs = {} if compile is None else {"compile": compile}
    return invimbed.from_sympy(t, z, th, dynamics, running, terminal, q=Q, **kwargs)


def depths(n: int) -> np.ndarray:
    """``n`` depths evenly spaced from ``q = 0`` down to ``-1``."""
    return np.linspace(Q, P_MIN, n)


# -- the problem, numpy (vectorised over a batch axis first) ------------------------------
def theta_of(t: Any) -> np.ndarray:
    """The torque at times ``t`` (scalar or any shape) -> ``t.shape + (M,)``; the piece
    with ``KNOTS[k] <= t`` (right-continuous, as ``PiecewiseConstant``)."""
    k = np.clip(np.searchsorted(KNOTS, np.asarray(t, float), side="right") - 1,
                0, VALUES.shape[0] - 1)
    return VALUES[k]


def piece_of(t: Any) -> np.ndarray:
    """Index of the torque piece at times ``t`` (same rule as `theta_of`)."""
    return np.clip(np.searchsorted(KNOTS, np.asarray(t, float), side="right") - 1,
                   0, VALUES.shape[0] - 1)




def R_theta(t: Any, z: np.ndarray, th: np.ndarray) -> np.ndarray:
    """(B, 2)."""
    return RHO * np.asarray(th, float) * np.ones((z.shape[0], 1))


def T_z(z: np.ndarray) -> np.ndarray:
    """(B, 4)."""
    return z - Z_TARGET


def depth_gradient(p: np.ndarray, x: np.ndarray, adjoint: np.ndarray) -> np.ndarray:
    """``dJ/dp = -(adjoint . f(p, x, theta(p)) + R(p, x, theta(p)))`` for depths ``p``
    (n,), one input ``x`` (N,) and adjoints (n, N) -> (n,); ``theta(p)`` is the piece
    from above (``KNOTS[k] <= p``), as in ``solve_adjoint``."""
    p = np.asarray(p, float)
    xs = np.broadcast_to(np.asarray(x, float), (p.size, N))
    th = theta_of(p)
    return -(np.sum(adjoint * f(p, xs, th), axis=1) + R(p, xs, th))


def fields_from(p: np.ndarray, x: np.ndarray, z: Any, value: Any, adjoint: Any,
                param_grad: Any) -> dict[str, np.ndarray]:
    """The five fields of another tool as float64 arrays, for one input ``x`` and depths
    ``p`` (n,); the depth gradient from the adjoint (see `depth_gradient`)."""
    out = {"z": np.asarray(z, float).reshape(-1, N),
           "value": np.asarray(value, float).reshape(-1),
           "adjoint": np.asarray(adjoint, float).reshape(-1, N),
           "param_grad": np.asarray(param_grad, float).reshape(-1, N_W)}
    out["depth_grad"] = depth_gradient(p, x, out["adjoint"])
    return out


# -- reference and accuracy ------------------------------------------------------------------
_PROBLEM: invimbed.BolzaProblem | None = None
_REFERENCES: dict[tuple, Any] = {}


def problem() -> invimbed.BolzaProblem:
    """One shared ``make_problem()`` (code generation is paid once per process)."""
    global _PROBLEM
    if _PROBLEM is None:
        _PROBLEM = make_problem()
    return _PROBLEM


def adjoint_keywords() -> set[str]:
    """The keyword arguments ``invimbed.solve_adjoint`` accepts."""
    return set(inspect.signature(invimbed.solve_adjoint).parameters)


def reference(n: int, x: Any = X0, rtol: float = 1e-11, atol: float = 1e-13) -> Any:
    """The classical adjoint method, one forward and one backward solve per depth, at
    ``depths(n)`` and tight tolerance (``strategy="per_depth"`` where ``solve_adjoint``
    has that keyword). Cached per ``(n, x, rtol, atol)`` for the life of the process."""
    x = np.asarray(x, float)
    key = (n, x.shape, x.tobytes(), rtol, atol)
    if key not in _REFERENCES:
        extra = {"strategy": "per_depth"} if "strategy" in adjoint_keywords() else {}
        res = invimbed.solve_adjoint(problem(), x, depths(n), control=CONTROL,
                                     rtol=rtol, atol=atol, **extra)
        if not res.success:
            raise RuntimeError(f"reference solve failed for n = {n}: {res.message}")
        _REFERENCES[key] = res
    return _REFERENCES[key]


def worst_rel_error(res: Mapping[str, Any], ref: Mapping[str, Any], *,
                    per_field: bool = False, floor: float = REL_FLOOR) -> Any:
    """Worst relative error over the five fields (see the module docstring):
    ``max |a - b| / max(|b|, floor * max|b|)`` per field, the largest over the fields
    (``per_field=True``: a dict field -> error). ``res`` and ``ref`` are anything with
    the five fields as keys (``ImbeddingResult``, a dict); shapes must agree."""
    errs = {}
    for name in FIELDS:
        a = np.asarray(res[name], float)
        b = np.asarray(ref[name], float)
        if a.shape != b.shape:
            raise ValueError(f"field {name!r}: shape {a.shape} against the reference's {b.shape}")
        big = float(np.max(np.abs(b))) if b.size else 0.0
        scale = np.maximum(np.abs(b), floor * big) if big > 0 else np.ones_like(b)
        errs[name] = float(np.max(np.abs(a - b) / scale)) if b.size else 0.0
        if not np.all(np.isfinite(a)):
            errs[name] = float("inf")
    return errs if per_field else max(errs.values())


def forced_double_pendulum(g: float = 3.0, amp: float = 2.0) -> tuple:
    """The 4-state forced double pendulum of ``bench_tol.py`` and ``bench_taylor_mode.py``:
    ``tests/problems.py``'s `forced_double_pendulum` (the problem of
    ``tests/test_accuracy.py``), ``(t, z, theta, f, R, T)`` as sympy objects."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from problems import forced_double_pendulum as spec
    return spec(g, amp)
