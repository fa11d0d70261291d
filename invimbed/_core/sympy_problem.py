"""Bolza problems from sympy expressions (optional extra ``invimbed[symbolic]``).

:func:`from_sympy` is the entry point; the derivatives come from
:class:`invimbed._core.derivatives.symbolic.SympyProvider`. sympy is imported only when
:func:`from_sympy` is called.
"""

from __future__ import annotations

from typing import Any, Sequence

from .problem import BolzaProblem


def from_sympy(t: Any, z: Sequence[Any], theta: Sequence[Any], dynamics: Any,
               running_loss: Any = None, terminal_loss: Any = None, *, q: float = 0.0,
               compile: str | None = None) -> BolzaProblem:
    r"""A :class:`~invimbed.BolzaProblem` from sympy symbols and expressions, with exact
    derivatives of every order.

    The problem is the paper's eq. (4),

    .. math::

        \dot z = f(t, z, \theta),\quad z(p) = x,\qquad
        J(\theta; p, x) = \int_p^q R(t, z, \theta)\,dt + T(z(q)),

    with ``f``, ``R``, ``T`` given as sympy expressions. Every derivative in ``z`` and
    ``theta`` that a solver asks for --- full tensors or the Taylor coefficients of a jet
    of any order (``solve_imbedding(..., closure="jet", order=K)``) --- is differentiated
    symbolically, simplified by common-subexpression elimination (``sympy.cse``),
    lambdified to numpy (vectorised over a batch) and cached: code is generated once per
    request, on first use. Prefer this over finite differences whenever the jet order
    is above 1 (finite differences serve total orders up to 3 only, with a few digits
    lost per order) and over hand-written derivative callables whenever the model fits
    in sympy (no transcription errors; check them with :func:`invimbed.check_derivatives`).
    High-order Taylor coefficients (a jet of order 3 and above, as ``tol`` asks for) are
    propagated through the expression graph instead (Taylor mode, see
    :class:`~invimbed.SympyProvider`'s ``taylor_mode``), at a cost polynomial in the order.
    Saturations and penalties (``Max``, ``Min``, ``Abs``, ``Piecewise``, ``Heaviside``,
    ``sign``) have derivatives almost everywhere: those of the branch at the point.

    Parameters
    ----------
    t : sympy.Symbol
        The time (depth) variable.
    z : sequence of N sympy.Symbol
        The state variables.
    theta : sequence of M sympy.Symbol
        The control variables; ``[]`` for none. A control passed to the solvers
        (``control=invimbed.Constant(...)``) supplies their values.
    dynamics : sequence of N sympy expressions, or a sympy Matrix
        ``f(t, z, theta)``.
    running_loss : sympy expression, optional
        ``R(t, z, theta)``; zero when omitted.
    terminal_loss : sympy expression, optional
        ``T(z)``, in ``z`` only; zero when omitted.
    q : float, default 0.0
        The output end of the depth interval.
    compile : {None, "numba"}, default None
        ``"numba"`` compiles the generated code with ``numba.njit`` (needs
        ``pip install invimbed[numba]``): faster per evaluation for small batches, about
        a second of compilation per derivative request. ``None`` (numpy) is the default
        and starts fastest.

    Returns
    -------
    BolzaProblem
        With ``vectorized=True`` numeric callables for ``f``, ``R``, ``T`` (lambdified;
        they also accept a single point) and the :class:`SympyProvider` as
        ``derivatives``.

    Raises
    ------
    TypeError
        If an argument is a string (text is never parsed with ``sympify``: build the
        expressions from symbols) or not a sympy symbol/expression.
    ValueError
        If ``len(dynamics) != len(z)``, a symbol repeats, an expression uses a symbol
        other than ``t``, ``z``, ``theta`` (``z`` only for ``terminal_loss``) or a function
        without numpy code (``erf``, ``gamma``: named in the message), ``q`` is not
        finite, or ``compile`` is unknown.
    ImportError
        If sympy is missing (``pip install invimbed[symbolic]``), or numba for
        ``compile="numba"`` (``pip install invimbed[numba]``).

    See Also
    --------
    invimbed.check_derivatives : compare a problem's derivatives with finite differences.

    References
    ----------
    A. Corbett and D. Kangin, "Imbedding Deep Neural Networks", ICLR 2022 (eq. (4)).

    Examples
    --------
    A pendulum driven by a constant torque ``u``, steered towards ``phi = 1``:

    >>> import numpy as np, sympy as sp, invimbed
    >>> from invimbed import from_sympy
    >>> t, phi, v, u = sp.symbols("t phi v u")
    >>> problem = from_sympy(t, [phi, v], [u], [v, -sp.sin(phi) + u],
    ...                      running_loss=u ** 2 / 2,
    ...                      terminal_loss=(phi - 1) ** 2 / 2 + v ** 2 / 2)
    >>> problem.dynamics(0.0, np.array([0.5, 0.0]), np.array([0.2]))
    array([ 0.        , -0.27942554])
    >>> res = invimbed.solve_imbedding(problem, [0.5, 0.0], [-1.0, -0.5], order=3,
    ...                                control=invimbed.Constant([0.2]))
    >>> bool(res.success)
    True
    """
    return BolzaProblem.from_sympy(t, z, theta, dynamics, running_loss, terminal_loss, q=q,
                                   compile=compile)
