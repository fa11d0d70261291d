"""Bolza problems from sympy expressions (optional extra ``invimbed[symbolic]``).

:func:`from_sympy` is the entry point; the derivatives come from
:class:`invimbed._core.derivatives.symbolic.SympyProvider`. sympy is imported only when
:func:`from_sympy` is called.
"""

from __future__ import annotations

from typing import Any, Sequence

from .bolza import BolzaProblem


def from_sympy(t: Any, z: Sequence[Any], theta: Sequence[Any], dynamics: Any,
               running_loss: Any = None, terminal_loss: Any = None, *, q: float = 0.0,
               compile: str | None = None) -> BolzaProblem:
    r"""A :class:`~invimbed.BolzaProblem` from sympy symbols and expressions, with exact
    derivatives of every order.

    ``f``, ``R``, ``T`` of eq. (4) are given as sympy expressions; every derivative a
    solver asks for is differentiated symbolically, simplified, lambdified to numpy and
    cached. Prefer it over finite differences whenever the jet order is above 1. Details:
    docs/derivatives.md, "from_sympy in detail".

    Parameters
    ----------
    t : sympy.Symbol
        The time (depth) variable.
    z : sequence of N sympy.Symbol
        The state variables.
    theta : sequence of M sympy.Symbol
        The control variables; ``[]`` for none (a solver's ``control`` gives the values).
    dynamics : sequence of N sympy expressions, or a sympy Matrix
        ``f(t, z, theta)``.
    running_loss : sympy expression, optional
        ``R(t, z, theta)``; zero when omitted.
    terminal_loss : sympy expression, optional
        ``T(z)``, in ``z`` only; zero when omitted.
    q : float, default 0.0
        The output end of the depth interval.
    compile : {None, "numba"}, default None
        ``"numba"`` compiles the generated code (``pip install invimbed[numba]``).

    Returns
    -------
    BolzaProblem
        Vectorised numeric ``f``, ``R``, ``T`` and the :class:`SympyProvider` as
        ``derivatives``.

    Raises
    ------
    TypeError
        A string (never parsed) or an argument that is not a sympy symbol/expression.
    ValueError
        Mismatched sizes, a repeated or foreign symbol, a function without numpy code
        (named), a non-finite ``q`` or an unknown ``compile``.
    ImportError
        sympy missing (``invimbed[symbolic]``), or numba for ``compile="numba"``.

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
