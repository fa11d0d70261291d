"""The imbedding sweep: every depth in one pass (the paper's Algorithm 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._closures import CLOSURES, JetClosure, StencilClosure
from ._derivatives import DerivativeOrderError
from ._integrators import SCIPY_METHODS, integrate_fixed, integrate_scipy
from ._problem import BolzaProblem
from ._results import ImbeddingResult
from ._setup import ALL_METHODS, collect_results, depth_gradient, prepare
from ._validation import check_choice, describe

def solve_imbedding(problem: BolzaProblem, x: Any, depths: Any, *, control: Any = None,
                    closure: str = "jet", order: int = 1, method: str = "RK45",
                    rtol: float = 1e-6, atol: float = 1e-9, step: float | None = None,
                    estimate_error: bool = True, difference: str = "central",
                    delta: Any = None, backend: str = "numpy",
                    **options: Any) -> ImbeddingResult:
    r"""Solve a Bolza problem for every requested depth in one sweep in ``p``.

    Integrates the imbedded fields of DESIGN.md section 2 --- the output
    ``Z(p, x) = z(q; p, x)`` (Theorem 1, eq. z-inim-t), the loss ``V(p, x)``, the
    imbedded adjoint ``Lam = grad_x V`` (Theorem 2, eq. lam-inim) and the parameter
    gradient ``Lam_w`` (eq. aug-lam-th-pde) --- from ``p = q``, where they are known
    (``x``, ``T(x)``, ``grad T(x)``, 0), down to the deepest requested depth. No forward
    pass in ``t`` is made.

    Parameters
    ----------
    problem : BolzaProblem
        Dynamics, running loss and terminal loss.
    x : array_like, shape (N,) or (B, N)
        The input (initial state at ``t = p``); a batch is solved vectorised.
    depths : array_like, shape (n,)
        Strictly monotone depths ``p_i <= q``, in any order; results follow it.
    control : Constant, PiecewiseConstant, Control or None
        Open-loop control ``theta(t; w)``; ``None`` means ``theta`` of size 0.
    closure : {"jet", "stencil", "crop"}
        How the nested Jacobians are closed (DESIGN.md section 3). ``"jet"`` (default,
        recommended) carries Taylor coefficients: order 1 is exact for affine dynamics
        with at most quadratic losses; otherwise ``z`` and ``value`` have error
        ``O(s^3)`` in depth ``s = q - p`` (``O(s^(K+2))`` for order ``K``), and so do
        ``adjoint`` and ``depth_grad`` unless ``D^3 T != 0`` (a non-quadratic terminal
        loss), which makes them ``O(s^2)`` (``O(s^(K+1))``). ``"stencil"`` carries the fields at ``2N + 1`` (``difference=
        "central"``, eq. grad-symm) or ``N + 1`` (``"forward"``, eq. grad-newton-x)
        points and needs only first derivatives. ``"crop"`` is the paper's eq. cropping,
        kept for reproduction only: it is not exact even for linear dynamics.
    order : int, default 1
        Jet order ``K`` (``closure="jet"``). The provider must give derivatives up to
        order ``K + 1`` (``K + 2`` with the error estimate).
    method : str, default "RK45"
        ``"RK45"``, ``"RK23"``, ``"DOP853"``, ``"Radau"``, ``"BDF"``, ``"LSODA"`` (scipy's
        adaptive solvers), fixed-step ``"euler"``, ``"midpoint"``, ``"rk4"`` (need
        ``step``), or ``"disc"``: the paper's discrete architecture, one layer between
        consecutive requested depths (eqs. disc-update and disc-lam).
    rtol, atol : float
        Tolerances of the adaptive solvers.
    step : float, optional
        Largest step in ``p`` for the fixed-step methods (each interval between requested
        depths and control jumps is divided evenly); ``max_step`` for scipy methods.
    estimate_error : bool, default True
        ``closure="jet"`` only: carry the jet of order ``K + 1`` alongside (sharing every
        derivative evaluation) and report the difference in ``error_estimate``. It costs
        one more derivative order; switch it off for speed.
    difference : {"central", "forward"}
        Difference quotient of ``closure="stencil"``.
    delta : float or array_like, optional
        Stencil spacing ``Delta_i``; default ``1e-3 * max(1, |x_i|)``.
    backend : {"numpy", "numba", "cupy"}
        Where the sweep runs. ``"numpy"`` (default) supports everything above; the
        accelerated backends (see "Performance and scale" in the docs) run fixed-step
        jet-1 and stencil sweeps and say clearly what they cannot do.
    **options
        Passed to ``scipy.integrate.solve_ivp`` (e.g. ``first_step``).

    Returns
    -------
    ImbeddingResult
        ``depths``, ``z``, ``value``, ``adjoint``, ``param_grad``, ``depth_grad``,
        ``success``, ``status``, ``message``, ``nfev``, ``error_estimate``. A non-finite
        value during the sweep ends it with ``success=False`` and a message naming the
        depth; depths not reached hold NaN.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments; the message names the argument, what was expected and
        what was received.

    Notes
    -----
    The depth gradient is the exact ``dJ/dp = -(Lam . Phi + R)`` (DESIGN.md section 2),
    not the paper's recursion eqs. aug-lam-t-init/aug-lam-t-pde, which is wrong (for
    ``dz/dt = 0.7 z``, ``T = z^2/2``, ``x = 1.3``, ``p = -1`` it gives 8.155 where
    ``-dJ/dp = 4.797``).

    References
    ----------
    A. Corbett and D. Kangin, "Imbedding Deep Neural Networks", ICLR 2022.

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
    check_choice(closure, "closure", CLOSURES)
    if backend == "cupy":  # device arrays in, device arrays out (docs: Performance and scale)
        from ._namespace import is_cupy_array, to_numpy

        if is_cupy_array(x):
            x = to_numpy(x)
            options.setdefault("array_type", "cupy")
    setup = prepare(problem, x, depths, control, method, rtol, atol, step, ALL_METHODS)
    if not isinstance(order, (int, np.integer)) or isinstance(order, bool) or order < 1:
        raise ValueError(f"`order` must be an integer >= 1, but got {describe(order)}")
    if closure != "jet" and order != 1:
        raise ValueError(f"`order` applies to closure='jet' only; closure={closure!r} needs "
                         f"order=1, but got order={order}")
    check_choice(difference, "difference", ("central", "forward"))
    est = bool(estimate_error) and closure == "jet" and method != "disc"
    if backend != "numpy":
        from ._backends import BACKENDS, sweep_backend

        check_choice(backend, "backend", ("numpy",) + tuple(BACKENDS))
        return sweep_backend(backend, setup, closure=closure, order=order, method=method,
                             step=step, difference=difference, delta=delta,
                             estimate_error=est, rtol=rtol, atol=atol, **options)
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
                         estimate_error=est, crop=(closure == "crop"))
    else:
        clo = StencilClosure(prov, setup.control, setup.x, setup.q, difference=difference,
                             delta=delta)

    y0 = clo.initial_state()
    breakpoints = setup.control.breakpoints
    if method in SCIPY_METHODS:
        if step is not None:
            options.setdefault("max_step", float(step))
        outcome = integrate_scipy(clo.rhs, y0, setup.q, setup.depths_desc, breakpoints,
                                  setup.piece_of, method=method, rtol=rtol, atol=atol, **options)
    else:
        outcome = integrate_fixed(clo.rhs, y0, setup.q, setup.depths_desc, breakpoints,
                                  setup.piece_of, method=method, step=step,
                                  disc_step=clo.disc_step)

    B, N = setup.x.shape

    def per_depth(p: float, y: np.ndarray):
        fl = clo.fields(y)
        fl["depth_grad"] = depth_gradient(setup, p, fl["adjoint"])
        return fl, clo.error_estimate(y)

    shapes = {"z": (B, N), "value": (B,), "adjoint": (B, N),
              "param_grad": (B, setup.control.n_params), "depth_grad": (B,)}
    return collect_results(setup, outcome, per_depth, shapes, closure=clo.name, method=method,
                           with_errors=clo.has_error_estimate)
