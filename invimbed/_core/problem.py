"""The Bolza problem (docs/theory.md, "The Bolza problem"; the paper's eq. (4)).

It knows nothing of solvers: it holds the user's dynamics and losses, evaluates them
on batches, validates what they return, and hands out the derivative provider.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from .derivatives import DerivativeProvider, FiniteDifferences, parse_key
from .derivatives.symbolic import SympyProvider
from .namespace import array_namespace
from .validation import check_callable, describe


class BolzaProblem:
    """A Bolza optimal-control problem on the depth interval ``[p, q]``.

    ```
    dz/dt = f(t, z, theta(t)),  z(p) = x,
    J(theta; p, x) = int_p^q R(t, z, theta) dt + T(z(q))
    ```

    (the paper's eq. (4)).

    Parameters
    ----------
    dynamics : callable ``f(t, z, theta) -> array, shape (N,)``
        The vector field.
    running_loss : callable ``R(t, z, theta) -> float``, optional
        Running loss; zero when omitted.
    terminal_loss : callable ``T(z) -> float``, optional
        Terminal loss; zero when omitted.
    q : float, default 0.0
        The output end of the depth interval; every depth ``p`` must satisfy ``p <= q``.
    derivatives : dict or DerivativeProvider, optional
        Exact derivatives. A dict maps names to callables with the same arguments as the
        function they differentiate: ``"f_z"`` (N, N), ``"f_theta"`` (N, M), ``"f_zz"``
        (N, N, N), ``"f_ztheta"`` (N, N, M), ``"f_zzz"``, ``"R_z"`` (N,), ``"R_theta"``
        (M,), ``"R_zz"`` (N, N), ``"R_ztheta"`` (N, M), ``"R_zzz"``, ``"T_z"`` (N,),
        ``"T_zz"`` (N, N), ``"T_zzz"``; output axes first, then ``z`` axes, then
        ``theta`` axes. Anything missing is obtained by central finite differences of
        the highest derivative given (see `invimbed.FiniteDifferences`). A
        `invimbed.DerivativeProvider` instance is used as it is.
    vectorized : bool, default False
        If True, every function (and derivative) accepts a batch: ``z`` of shape
        (B, N) and ``theta`` of shape (B, M), and returns the batch of results
        ((B, N) for the dynamics, (B,) for the losses). Vectorised functions make
        batched solves and finite differences fast; otherwise they are called row by
        row. ``t`` is always a float: where the rows of a batch are at different times
        (the ensemble `invimbed.solve_adjoint`), a vectorised function is called once per
        distinct time, unless the problem is declared ``autonomous``.
    autonomous : bool, default False
        Declares that ``dynamics`` and ``running_loss`` do not depend on ``t``: vectorised
        functions are then called once for a whole batch whose rows are at different
        times. The declaration is checked once, at the first solve, by evaluating the
        functions at two times; a function that depends on ``t`` raises ``ValueError``.

    Raises
    ------
    TypeError
        If a function is not callable, ``derivatives`` is neither a dict nor a
        provider, or ``vectorized``, ``autonomous`` or ``check_derivatives`` is not a
        bool.
    ValueError
        If ``q`` is not finite or a derivative name is unknown.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> g = 9.81
    >>> problem = invimbed.BolzaProblem(
    ...     lambda t, z, th: np.array([z[1], -g]),
    ...     terminal_loss=lambda z: 0.5 * z[0] ** 2, q=1.0)
    >>> problem
    BolzaProblem(q=1.0, running_loss=no, terminal_loss=yes, derivatives='finite differences')
    """

    def __init__(self, dynamics: Callable, running_loss: Callable | None = None,
                 terminal_loss: Callable | None = None, *, q: float = 0.0,
                 derivatives: Mapping[str, Callable] | DerivativeProvider | None = None,
                 vectorized: bool = False, autonomous: bool = False,
                 check_derivatives: bool = True) -> None:
        check_callable(dynamics, "dynamics")
        check_callable(running_loss, "running_loss", allow_none=True)
        check_callable(terminal_loss, "terminal_loss", allow_none=True)
        try:
            q = float(q)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"`q` must be a real number, but got {describe(q)}") from exc
        if not np.isfinite(q):
            raise ValueError(f"`q` must be finite, but got {q}")
        self.dynamics = dynamics
        self.running_loss = running_loss
        self.terminal_loss = terminal_loss
        self.q = q
        if not isinstance(vectorized, (bool, np.bool_)):
            raise TypeError(f"`vectorized` must be True or False, but got {describe(vectorized)}")
        if not isinstance(autonomous, (bool, np.bool_)):
            raise TypeError(f"`autonomous` must be True or False, but got {describe(autonomous)}")
        if not isinstance(check_derivatives, (bool, np.bool_)):
            raise TypeError(f"`check_derivatives` must be True or False, but got "
                            f"{describe(check_derivatives)}")
        self.vectorized = bool(vectorized)
        self.autonomous = bool(autonomous)
        self.check_derivatives = bool(check_derivatives)
        self._user_provider: DerivativeProvider | None = None
        self._known: dict[tuple[str, int, int], Callable] = {}
        if isinstance(derivatives, DerivativeProvider):
            self._user_provider = derivatives
        elif derivatives is not None:
            if not isinstance(derivatives, Mapping):
                raise TypeError(
                    "`derivatives` must be a dict of callables (e.g. {'f_z': ...}) or a "
                    f"DerivativeProvider, but got {describe(derivatives)}"
                )
            for key, fn in derivatives.items():
                parsed = parse_key(key)
                check_callable(fn, f"derivatives[{key!r}]")
                if parsed[0] == "R" and running_loss is None:
                    raise ValueError(f"`derivatives` gives {key!r} but `running_loss` is None")
                if parsed[0] == "T" and terminal_loss is None:
                    raise ValueError(f"`derivatives` gives {key!r} but `terminal_loss` is None")
                self._known[parsed] = fn
        self._providers: dict[tuple[int, int], DerivativeProvider] = {}
        self._checked: set[tuple[int, int]] = set()
        self._derivatives_checked: set[tuple[int, int]] = set()

    @classmethod
    def from_sympy(cls, t: Any, z: Any, theta: Any, dynamics: Any, running_loss: Any = None,
                   terminal_loss: Any = None, *, q: float = 0.0,
                   compile: str | None = None) -> "BolzaProblem":
        """A problem from sympy symbols and expressions, with exact derivatives of every
        order (``pip install invimbed[symbolic]``); see `invimbed.from_sympy`."""
        provider = SympyProvider(t, z, theta, dynamics, running_loss, terminal_loss,
                                 compile=compile)
        return cls(
            provider.numeric("f"),
            None if running_loss is None else provider.numeric("R"),
            None if terminal_loss is None else provider.numeric("T"),
            q=q, derivatives=provider, vectorized=True,
        )

    def __repr__(self) -> str:
        if self._user_provider is not None:
            deriv = repr(self._user_provider.name)
        elif self._known:
            deriv = repr("user: " + ", ".join(sorted(_key_name(k) for k in self._known)))
        else:
            deriv = repr("finite differences")
        return (f"BolzaProblem(q={self.q}, running_loss={'yes' if self.running_loss else 'no'}, "
                f"terminal_loss={'yes' if self.terminal_loss else 'no'}, derivatives={deriv})")

    # -- evaluation on batches ---------------------------------------------------------
    def _batched(self, fn: Callable | None, which: str, key: tuple[str, int, int]) -> Callable:
        """Wrap a user callable as ``g(t, z (B,N), theta (B,M)) -> (B, *shape)``."""
        if fn is None:  # a missing loss is zero, and so are its derivatives
            def zero(t, z, theta):
                n, m = z.shape[1], theta.shape[1]
                shape = (z.shape[0],) + (n,) * key[1] + (m,) * key[2]
                return array_namespace(z).zeros(shape)
            return zero
        vectorized = self.vectorized

        def call(t, z, theta):
            if which == "T":
                return fn(z)
            return fn(t, z, theta)

        if vectorized:
            autonomous = self.autonomous or which == "T"

            def g(t, z, theta):   # numpy, or cupy arrays on backend="cupy"
                xp = array_namespace(z)
                if np.ndim(t) != 0:   # per-row times reach here only when t is not read
                    if not autonomous:  # (the provider's row_times, see `provider`)
                        raise RuntimeError("internal error: per-row times for a vectorised "
                                           "function of t")
                    t = float(t[0]) if len(t) else 0.0
                return xp.asarray(call(t, z, theta), dtype=xp.float64)
        else:
            def g(t, z, theta):
                ts = np.broadcast_to(t, (z.shape[0],))      # a time per row
                rows = [np.asarray(call(float(ts[b]), z[b], theta[b]), dtype=float)
                        for b in range(z.shape[0])]
                if not rows:
                    return np.zeros((0,))
                return np.stack(rows)
        return g

    def provider(self, n_state: int, n_theta: int) -> DerivativeProvider:
        """The derivative provider for state size ``N`` and control size ``M``."""
        if self._user_provider is not None:
            prov = self._user_provider
            if (getattr(prov, "n_state", n_state), getattr(prov, "n_theta", n_theta)) != (n_state, n_theta):
                raise ValueError(
                    f"the problem's derivative provider is for N={prov.n_state}, "
                    f"M={prov.n_theta}, but the solve has N={n_state}, M={n_theta}"
                )
            return prov
        key = (n_state, n_theta)
        if key not in self._providers:
            functions = {
                "f": self._batched(self.dynamics, "f", ("f", 0, 0)),
                "R": self._batched(self.running_loss, "R", ("R", 0, 0)),
                "T": self._batched(self.terminal_loss, "T", ("T", 0, 0)),
            }
            known = {k: self._batched(fn, k[0], k) for k, fn in self._known.items()}
            zero = tuple(w for w, fn in (("R", self.running_loss), ("T", self.terminal_loss))
                         if fn is None)
            prov = FiniteDifferences(functions, n_state, n_theta, known=known, zero=zero)
            # rows at different times in one call: per-sample functions take each row's
            # time, autonomous ones none; vectorised functions of t are called once per
            # distinct time by `DerivativeProvider.derivative`
            prov.row_times = not self.vectorized or self.autonomous
            self._providers[key] = prov
        return self._providers[key]

    def check_shapes(self, t: float, x: np.ndarray, theta: np.ndarray, *,
                     derivatives: bool = True) -> None:
        """Call each function once at ``(t, x[0], theta)`` and check what it returns.

        Every solver calls it at its first point; the checks are made once per state
        and control size ``(N, M)``.

        Parameters
        ----------
        t : float
            The time of the point.
        x : ndarray, shape (B, N)
            The states; the first row is used.
        theta : ndarray, shape (M,)
            The control values.
        derivatives : bool, default True
            Also check the user's derivative callables against finite differences (when
            the problem has some and was built with ``check_derivatives=True``).

        Raises
        ------
        ValueError
            If the dynamics do not return shape (N,), or a loss is not a scalar, or a
            value is not finite at the starting point, or (``derivatives``) a user
            derivative does not match finite differences, naming it.
        """
        n_state, n_theta = x.shape[1], theta.size
        key = (n_state, n_theta)
        if key not in self._checked:
            self._check_values(t, x, theta)
            self._checked.add(key)
        if (derivatives and self.check_derivatives and self._known
                and key not in self._derivatives_checked):
            from .check import verify_user_derivatives

            verify_user_derivatives(self, t, x, theta)
            self._derivatives_checked.add(key)

    def _check_values(self, t: float, x: np.ndarray, theta: np.ndarray) -> None:
        n_state = x.shape[1]
        z0 = x[:1]
        th0 = theta[None, :]
        checks = [("dynamics", self.dynamics, "f", (n_state,)),
                  ("running_loss", self.running_loss, "R", ()),
                  ("terminal_loss", self.terminal_loss, "T", ())]
        for name, fn, which, shape in checks:
            if fn is None:
                continue
            if self.vectorized:
                out = fn(z0) if which == "T" else fn(t, z0, th0)
                expected = (1,) + shape
            else:
                out = fn(z0[0]) if which == "T" else fn(t, z0[0], th0[0])
                expected = shape
            try:
                out = np.asarray(out, dtype=float)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"`{name}` must return real numbers, but returned "
                                f"{describe(out)}") from exc
            if out.shape != expected:
                what = "an array of shape (N,) = " + str((n_state,)) if which == "f" else "a scalar"
                batch = " (vectorized=True: a leading batch axis)" if self.vectorized else ""
                raise ValueError(
                    f"`{name}` must return {what}{batch}, i.e. shape {expected}, but returned "
                    f"shape {out.shape}"
                )
        if self.autonomous:
            self._check_autonomous(t, x[:1], theta[None, :])

    def _check_autonomous(self, t: float, z: np.ndarray, theta: np.ndarray) -> None:
        """Refute ``autonomous=True`` where a function changes with ``t``."""
        for name, fn in (("dynamics", self.dynamics), ("running_loss", self.running_loss)):
            if fn is None:
                continue
            args = (z, theta) if self.vectorized else (z[0], theta[0])
            values = [np.asarray(fn(s, *args), dtype=float) for s in (t, t - 0.731, t + 1.913)]
            if not all(np.array_equal(values[0], v) for v in values[1:]):
                raise ValueError(
                    f"`autonomous=True` was declared, but `{name}` depends on t: it returns "
                    f"different values at t = {t}, {t - 0.731} and {t + 1.913} for the same z "
                    f"and theta; drop `autonomous=True`")


def _key_name(key: tuple[str, int, int]) -> str:
    return f"{key[0]}_{'z' * key[1]}{'theta' * key[2]}"
