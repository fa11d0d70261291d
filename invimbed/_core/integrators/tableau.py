"""Explicit Runge--Kutta methods as data: one checked `ButcherTableau` type.

Every explicit method of the package is a tableau here, and every integrator reads its
coefficients from here: the fixed-step schedule (`schedule.fixed_schedule`, and through
it the compiled fixed-step kernels), the adaptive ensemble (`ensemble.integrate_rows`) and
the compiled adaptive kernels (`invimbed._backends._ensemble_kernels`,
`invimbed._backends._sweep_kernels`). The embedded pairs are read once, below, from
scipy's classes (``scipy.integrate.RK23``, ``RK45``, ``DOP853``: their class attributes
``A``, ``B``, ``C``, ``E``, ``P``), so that an adaptive solve here takes scipy's steps.

Names follow scipy's: ``A`` (S, S) the Runge--Kutta matrix, ``B`` (S,) the weights,
``C`` (S,) the nodes, ``E`` the error weights (``b_hat - b``; with FSAL, S + 1 of them,
the last one for the stage at the step's end), ``P`` the dense-output coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from scipy.integrate import DOP853, RK23, RK45

#: How far ``C`` may be from the row sums of ``A``, and the weights' sums from 1 and 0
#: (scipy's own test of its tableaux allows the same).
_ROUNDING = 1e-14


def _array(value: object, name: str, what: str, ndim: int) -> np.ndarray:
    arr = np.array(value, dtype=float)
    if arr.ndim != ndim:
        raise ValueError(f"tableau {name!r}: `{what}` must be {ndim}-dimensional, but has "
                         f"shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"tableau {name!r}: `{what}` must be finite, but holds {arr!r}")
    return arr


@dataclass(frozen=True, eq=False)
class ButcherTableau:
    """An explicit Runge--Kutta method, optionally with an embedded pair and a continuous
    extension, checked at construction.

    Parameters
    ----------
    name : str
    A : array_like, shape (S, S) or (S, S - 1)
        Strictly lower triangular (explicit); padded with zero columns to (S, S).
    B : array_like, shape (S,)
        Weights, summing to one.
    C : array_like, shape (S,)
        Nodes, equal to the row sums of ``A``.
    order : int
        Order of the solution ``y + h sum B_j K_j``.
    E : array_like, shape (S,) or (S + 1,), optional
        Error weights ``b_hat - b`` of the embedded solution (summing to zero); S + 1 with
        ``fsal``, the last for the derivative at the step's end.
    error_order : int, optional
        Order of the embedded solution (scipy's ``error_estimator_order``).
    fsal : bool
        First same as last: the derivative at the step's end is the next step's first.
    P : array_like, shape (S or S + 1, k), optional
        Dense output: ``y(t_old + x h) = y_old + h K^T P [x, x^2, ..., x^k]``.

    Raises
    ------
    ValueError
        On shapes that do not match, an ``A`` that is not strictly lower triangular,
        ``C`` not the row sums of ``A``, weights that do not sum to one (``E``: zero).
    """

    name: str
    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    order: int
    E: np.ndarray | None = None
    error_order: int | None = None
    fsal: bool = False
    P: np.ndarray | None = None

    def __post_init__(self) -> None:
        name = self.name
        B = _array(self.B, name, "B", 1)
        C = _array(self.C, name, "C", 1)
        A = _array(self.A, name, "A", 2)
        S = B.size
        if C.size != S:
            raise ValueError(f"tableau {name!r}: `C` must have {S} entries (as `B`), but has "
                             f"{C.size}")
        if A.shape[0] != S or A.shape[1] not in (S, S - 1):
            raise ValueError(f"tableau {name!r}: `A` must have shape ({S}, {S}), but has "
                             f"{A.shape}")
        if A.shape[1] == S - 1:
            A = np.concatenate([A, np.zeros((S, 1))], axis=1)
        if np.any(np.triu(A) != 0):
            raise ValueError(f"tableau {name!r}: `A` must be strictly lower triangular (an "
                             f"explicit method), but has {A!r}")
        if not np.allclose(A.sum(axis=1), C, rtol=_ROUNDING, atol=_ROUNDING):
            raise ValueError(f"tableau {name!r}: `C` must be the row sums of `A` "
                             f"({A.sum(axis=1)!r}), but is {C!r}")
        if abs(B.sum() - 1.0) > _ROUNDING:
            raise ValueError(f"tableau {name!r}: the weights `B` must sum to 1, but sum to "
                             f"{B.sum()!r}")
        if int(self.order) < 1:
            raise ValueError(f"tableau {name!r}: `order` must be >= 1, but is {self.order!r}")
        stages = S + 1 if self.fsal else S
        E = P = None
        if self.E is not None:
            E = _array(self.E, name, "E", 1)
            if E.size not in (S, stages):
                raise ValueError(f"tableau {name!r}: `E` must have {stages} entries, but has "
                                 f"{E.size}")
            if abs(E.sum()) > _ROUNDING:
                raise ValueError(f"tableau {name!r}: the error weights `E` must sum to 0, but "
                                 f"sum to {E.sum()!r}")
            if self.error_order is None:
                raise ValueError(f"tableau {name!r}: `E` given without `error_order`")
        if self.P is not None:
            P = _array(self.P, name, "P", 2)
            if P.shape[0] not in (S, stages):
                raise ValueError(f"tableau {name!r}: `P` must have {stages} rows, but has "
                                 f"shape {P.shape}")
        for key, value in (("A", A), ("B", B), ("C", C), ("E", E), ("P", P)):
            object.__setattr__(self, key, value)
        object.__setattr__(self, "order", int(self.order))
        if self.error_order is not None:
            object.__setattr__(self, "error_order", int(self.error_order))

    @property
    def n_stages(self) -> int:
        """Stages of one step (without the FSAL evaluation at its end)."""
        return int(self.B.size)

    @property
    def embedded(self) -> bool:
        """Whether the method carries an error estimate (an embedded pair)."""
        return self.E is not None

    @property
    def b_hat(self) -> np.ndarray | None:
        """Weights of the embedded solution, ``B + E`` (over S + 1 stages with FSAL)."""
        if self.E is None:
            return None
        B = np.concatenate([self.B, np.zeros(self.E.size - self.B.size)])
        return B + self.E

    @property
    def stiff_stage(self) -> int | None:
        """The last stage ``s`` (not the first): where Shampine's ``h |lambda|`` test
        compares the derivative with the one at the step's end (``C[s] == 1`` for RK45
        and DOP853, where the estimate is Shampine's own; ``3/4`` for RK23), the stage
        `invimbed._core.integrators.scipy_ivp.h_lambda` takes; None for one stage."""
        return self.C.size - 1 if self.C.size > 1 else None

    @classmethod
    def from_scipy(cls, solver: type, n_stages: int | None = None) -> "ButcherTableau":
        """The tableau of one of scipy's explicit ``RungeKutta`` classes, read from its
        class attributes (``DOP853``: the first ``n_stages`` stages; its error estimate is
        not a single embedded pair and is left out)."""
        S = int(solver.n_stages if n_stages is None else n_stages)
        E = getattr(solver, "E", None)
        E = E if isinstance(E, np.ndarray) else None
        P = getattr(solver, "P", None)
        P = P if isinstance(P, np.ndarray) else None
        return cls(solver.__name__, np.asarray(solver.A)[:S, :S], np.asarray(solver.B),
                   np.asarray(solver.C)[:S], int(solver.order), E=E,
                   error_order=int(solver.error_estimator_order) if E is not None else None,
                   fsal=True, P=P)


EULER = ButcherTableau("euler", [[0.0]], [1.0], [0.0], order=1)
MIDPOINT = ButcherTableau("midpoint", [[0.0, 0.0], [0.5, 0.0]], [0.0, 1.0], [0.0, 0.5],
                          order=2)
RK4 = ButcherTableau("rk4", [[0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0],
                             [0.0, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],
                     [1 / 6, 1 / 3, 1 / 3, 1 / 6], [0.0, 0.5, 0.5, 1.0], order=4)

#: Every explicit tableau of the package, by method name (the only place they are kept).
TABLEAUX = MappingProxyType({
    "euler": EULER, "midpoint": MIDPOINT, "rk4": RK4,
    "RK45": ButcherTableau.from_scipy(RK45), "RK23": ButcherTableau.from_scipy(RK23),
    "DOP853": ButcherTableau.from_scipy(DOP853),
})

#: The embedded pairs with a continuous extension: what the ensemble and the compiled
#: adaptive kernels step natively.
EMBEDDED = tuple(name for name, tab in TABLEAUX.items()
                 if tab.embedded and tab.P is not None)
