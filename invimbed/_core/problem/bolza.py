"""The Bolza problem (docs/theory.md, "The Bolza problem"; the paper's eq. (4)).

It knows nothing of solvers: it holds the user's dynamics and losses, evaluates them
on batches, validates what they return, and hands out the derivative provider.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from ..derivatives import guard as derivative_guard
from ..derivatives import DerivativeProvider, FiniteDifferences, derivative_name, parse_key
from ..derivatives.symbolic import SympyProvider
from ..derivatives.traced import MODES, PENDING, traced_provider, user_names
from ..runtime.namespace import array_namespace
from ..inputs.probe import first_call, per_sample_error, precision_warning, writes_at_test_points
from ..results.results import SolverWarning
from ..runtime.row_times import TimeContract, per_distinct_time
from ..inputs.size_errors import index_error, theta_size_that_fits
from ..inputs.validation import (as_bool, as_real, check_callable, check_choice, describe,
                                 returned_reals)


class BolzaProblem:
    """A Bolza optimal-control problem on the depth interval ``[p, q]``.

    ```
    dz/dt = f(t, z, theta(t)),  z(p) = x,
    J(theta; p, x) = int_p^q R(t, z, theta) dt + T(z(q))
    ```

    (the paper's eq. (4)). Every setting in detail: docs/derivatives.md, "BolzaProblem in
    detail".

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
    derivatives : dict, DerivativeProvider or {"auto", "trace", "finite-differences"}, optional
        Where the derivatives come from: callables by name (``"f_z"``, ``"R_theta"``, ...;
        the ones not given are traced), a provider, or (``"auto"``) the functions traced
        into sympy; finite differences where tracing fails (docs/derivatives.md).
    vectorized : bool, default False
        Every function accepts a batch, ``z`` (B, N) and ``theta`` (B, M); ``t`` is a
        float or an array (B,) of per-row times.
    autonomous : bool, default False
        Declares that ``dynamics`` and ``running_loss`` do not depend on ``t`` (checked).
    check_derivatives : bool, default True
        Compare the callables given in ``derivatives`` with finite differences at the
        first solve (as `invimbed.check_derivatives` does) and raise on a wrong one.

    Raises
    ------
    TypeError
        If a function is not callable, ``derivatives`` is neither a dict nor a
        provider, ``q`` is not a real number (a string, a bool, a complex number), or
        ``vectorized``, ``autonomous`` or ``check_derivatives`` is not a bool.
    ValueError
        If ``q`` is not finite or a derivative name is unknown.

    Notes
    -----
    The solvers call every function (and derivative callable) on copies of their state,
    so a function cannot change the solution by writing into ``z`` or ``theta``; such a
    write is refused at the first solve where the first point or a seeded test point
    shows it (docs/tutorial.md, section 9).

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> g = 9.81
    >>> problem = invimbed.BolzaProblem(
    ...     lambda t, z, th: np.array([z[1], -g]),
    ...     terminal_loss=lambda z: 0.5 * z[0] ** 2, q=1.0)
    >>> problem
    BolzaProblem(q=1.0, running_loss=no, terminal_loss=yes, derivatives='auto')
    """

    def __init__(self, dynamics: Callable, running_loss: Callable | None = None,
                 terminal_loss: Callable | None = None, *, q: float = 0.0,
                 derivatives: Mapping[str, Callable] | DerivativeProvider | str | None = None,
                 vectorized: bool = False, autonomous: bool = False,
                 check_derivatives: bool = True) -> None:
        check_callable(dynamics, "dynamics")
        check_callable(running_loss, "running_loss", allow_none=True)
        check_callable(terminal_loss, "terminal_loss", allow_none=True)
        try:
            q = as_real(q, "q", allow_inf=True)     # TypeError for str, bool, complex
        except ValueError:                           # NaN: the message below
            q = float("nan")
        if not np.isfinite(q):
            raise ValueError(f"`q` must be finite, but got {q}")
        self.dynamics = dynamics
        self.running_loss = running_loss
        self.terminal_loss = terminal_loss
        self.q = q
        self.vectorized = as_bool(vectorized, "vectorized")
        self.autonomous = as_bool(autonomous, "autonomous")
        self.check_derivatives = as_bool(check_derivatives, "check_derivatives")
        self._user_provider: DerivativeProvider | None = None
        self._known: dict[tuple[str, int, int], Callable] = {}
        #: ``"auto"``, ``"trace"`` or ``"finite-differences"`` (docs/derivatives.md)
        self.derivative_mode = "auto"
        if derivatives is None or isinstance(derivatives, str):
            self.derivative_mode = check_choice(derivatives or "auto", "derivatives", MODES)
        elif isinstance(derivatives, DerivativeProvider):
            self._user_provider = derivatives
        elif derivatives is not None:
            if not isinstance(derivatives, Mapping):
                raise TypeError(
                    "`derivatives` must be a dict of callables (e.g. {'f_z': ...}), a "
                    f"DerivativeProvider or one of {MODES}, but got {describe(derivatives)}"
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
        self._time_contract = TimeContract()
        #: functions returning less than float64, found by `probe.first_call`
        self.low_precision: dict[str, np.dtype] = {}
        self._source: str | None = None

    @property
    def derivative_source(self) -> str:
        """Where the last solve's derivatives came from (``"exact: ..."``, ``"user: ..."``,
        ``"finite differences (why)"``), as every result's ``derivatives``."""
        if self._user_provider is not None:
            return f"exact: the user's {self._user_provider.name}"
        if self._known and self._source is None:
            return f"{user_names(self._known)}; the rest traced at the first solve"
        return self._source or PENDING[self.derivative_mode]

    @property
    def derivative_provider(self) -> DerivativeProvider | None:
        """The `DerivativeProvider` passed as ``derivatives``, or ``None`` (then the
        derivatives are `known_derivatives` completed by the traced functions, or by
        finite differences where tracing fails)."""
        return self._user_provider

    @property
    def known_derivatives(self) -> Mapping[tuple[str, int, int], Callable]:
        """The derivative callables passed as a dict, read-only, keyed by
        ``(which, dz, dtheta)`` as parsed from their names (``"f_zz"`` is
        ``("f", 2, 0)``); empty when none or a provider was given."""
        return MappingProxyType(self._known)

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
            deriv = repr(user_names(self._known))
        elif self._source is not None:
            deriv = repr("traced" if self._source.startswith("exact") else
                         "finite differences")
        else:
            deriv = repr(self.derivative_mode)
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

        def on_copies(t, z, theta):   # the solvers' arrays stay theirs (`probe`)
            return call(t, z.copy(), theta.copy())

        if vectorized:
            autonomous = self.autonomous or which == "T"
            name = _FUNCTION_NAMES.get(key, f"derivatives[{_key_name(key)!r}]")
            contract = self._time_contract

            def g(t, z, theta):   # numpy, or cupy arrays on backend="cupy"
                xp = array_namespace(z)
                rows = type(t) is not float and np.ndim(t) != 0
                if rows:   # per-row times (see `invimbed._core.runtime.row_times`)
                    t = np.asarray(t, dtype=float)
                    if autonomous or t.size == 0 or np.all(t == t[0]):
                        t = float(t[0]) if t.size else self.q
                    elif not contract.accepts_array(name, on_copies, t, z, theta, xp):
                        return per_distinct_time(on_copies, t, z, theta, xp)
                    else:
                        t = xp.asarray(t)
                return xp.asarray(on_copies(t, z, theta), dtype=xp.float64)
        else:
            def g(t, z, theta):
                ts = np.broadcast_to(t, (z.shape[0],))      # a time per row
                z, theta = z.copy(), theta.copy()           # one copy per batch (`probe`)
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
        prov = self._providers.get(key)
        if prov is not None and getattr(prov, "traced", False) and not prov.still_matches():
            prov = None      # the functions changed since they were traced: trace again
        if prov is None:
            functions = {
                "f": self._batched(self.dynamics, "f", ("f", 0, 0)),
                "R": self._batched(self.running_loss, "R", ("R", 0, 0)),
                "T": self._batched(self.terminal_loss, "T", ("T", 0, 0)),
            }
            known = {k: self._batched(fn, k[0], k) for k, fn in self._known.items()}
            prov, source = traced_provider(self, functions, n_state, n_theta, known)
            if prov is None:
                zero = tuple(w for w, fn in (("R", self.running_loss),
                                             ("T", self.terminal_loss)) if fn is None)
                prov = FiniteDifferences(functions, n_state, n_theta, known=known, zero=zero)
                prov.derivative_source = source
            self._source = source
            self._providers[key] = prov
        return prov

    def check_sizes(self, n_state: int, n_theta: int, *, control: str = "control",
                    control_given: bool = True) -> None:
        """Compare the sizes of ``x`` and the control with the problem's, where it knows
        them (a derivative provider, e.g. `invimbed.from_sympy`: its state and control
        symbols), before any of its functions is called.

        Parameters
        ----------
        n_state : int
            ``N``, the length of ``x`` (per input).
        n_theta : int
            ``M``, the size of the control's ``theta(t)``.
        control : str, default "control"
            The argument that gave the control, for the message (``"theta"`` in
            `invimbed.check_derivatives`).
        control_given : bool, default True
            Whether a control was given at all.

        Raises
        ------
        ValueError
            Naming ``x`` or ``control``: its size, the problem's and its symbols.
        """
        prov = self._user_provider
        if prov is None:
            return
        N, M = getattr(prov, "n_state", None), getattr(prov, "n_theta", None)
        if N is not None and n_state != N:
            raise ValueError(
                f"`x` must have N = {N} entries per input (one per state symbol"
                f"{_symbols(prov, 'z', ':')}), but got {n_state}")
        if M is not None and n_theta != M:
            if not control_given:
                values = "[" + ", ".join(["0.0"] * M) + "]"
                example = (f"control=invimbed.Constant({values}) (or a PiecewiseConstant or "
                           f"Control)" if control == "control" else f"{control}={values}")
                raise ValueError(
                    f"`{control}` is required: the problem has {M} control symbol(s)"
                    f"{_symbols(prov, 'theta', ':')}; pass {example} with {M} value(s)")
            raise ValueError(
                f"`{control}` must have M = {M} value(s) (one per control symbol"
                f"{_symbols(prov, 'theta', ':')}), but it has {n_theta}")

    def check_shapes(self, t: float, x: np.ndarray, theta: np.ndarray, *,
                     derivatives: bool = True, control: str = "control") -> None:
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
        control : str, default "control"
            The argument that gave ``theta``, for the messages.

        Raises
        ------
        ValueError
            If the dynamics return an array of another length than ``x`` (naming ``x``
            first), a function reads an entry of ``theta`` or ``z`` beyond their size
            (its IndexError, naming ``control`` or ``x`` and the index read), a loss is
            not a scalar, a function or derivative callable writes into its arguments (at
            the first point or a seeded test point, `invimbed._core.inputs.probe`), a derivative
            callable returns another shape than one sample's (naming its key, e.g.
            ``derivatives['f_z']``), or (``derivatives``) a user derivative does not match
            finite differences, naming it.
        """
        n_state, n_theta = x.shape[1], theta.size
        key = (n_state, n_theta)
        if key not in self._checked:
            self._check_values(t, x, theta, control)
            self._checked.add(key)
        if (derivatives and self.check_derivatives and self._known
                and key not in self._derivatives_checked):
            derivative_guard.verify_user_derivatives(self, t, x, theta)
            self._derivatives_checked.add(key)

    def _check_values(self, t: float, x: np.ndarray, theta: np.ndarray,
                      control: str = "control") -> None:
        n_state = x.shape[1]
        z0 = x[:1]
        th0 = theta[None, :]
        checks = [("dynamics", self.dynamics, "f", (n_state,)),
                  ("running_loss", self.running_loss, "R", ()),
                  ("terminal_loss", self.terminal_loss, "T", ())]
        for name, fn, which, shape in checks:
            if fn is None:
                continue
            z, th = (z0, th0) if self.vectorized else (z0[0], th0[0])
            expected = ((1,) if self.vectorized else ()) + shape
            try:
                out, narrow = first_call(fn, name, which, t, z, th)
            except IndexError as exc:
                blamed = index_error(exc, name, fn, which, t, z, th, control,
                                     vectorized=self.vectorized)
                if blamed is exc and self.vectorized:
                    blamed = per_sample_error(fn, name, which, t, z, th, exc) or exc
                if blamed is exc:       # neither theta nor z: the user's own indexing
                    raise
                raise blamed from exc
            except (ValueError, TypeError) as exc:
                wrong = (per_sample_error(fn, name, which, t, z, th, exc)
                         if self.vectorized and not getattr(exc, "from_first_call", False)
                         else None)
                if wrong is None:
                    raise
                raise wrong from exc
            writes_at_test_points(fn, name, which, t, z, th)
            if narrow is not None:
                self.low_precision[name] = narrow
            out = returned_reals(out, f"`{name}`")
            if (which == "f" and out.ndim == len(expected) >= 1 and out.shape[:-1] == expected[:-1]
                    and out.shape[-1] != n_state):
                batch = " (vectorized=True: with a leading batch axis)" if self.vectorized else ""
                M = th.shape[-1]
                right = theta_size_that_fits(fn, t, z, th, expected)
                if right is not None:     # e.g. theta[:, :1] of an empty theta, or f = theta
                    raise ValueError(
                        f"`{control}` {'is required' if M == 0 else f'has M = {M} value(s)'}: "
                        f"`dynamics` returned shape {out.shape} with "
                        f"{'no control' if M == 0 else 'them'}{batch}, and the right shape "
                        f"{expected} with {right} value(s); pass a control of size {right}, "
                        f"e.g. control=invimbed.Constant([...]), or fix the dynamics")
                raise ValueError(
                    f"`x` has N = {n_state} entries, but `dynamics` returned shape "
                    f"{out.shape}{batch}: pass an x of length {out.shape[-1]}, or fix the "
                    f"dynamics, which must return one derivative per entry of x, shape "
                    f"{expected}")
            if out.shape != expected:
                what = "an array of shape (N,) = " + str((n_state,)) if which == "f" else "a scalar"
                batch = " (vectorized=True: a leading batch axis)" if self.vectorized else ""
                raise ValueError(
                    f"`{name}` must return {what}{batch}, i.e. shape {expected}, but returned "
                    f"shape {out.shape}"
                )
        self._check_derivative_shapes(t, z0, th0)
        if self.autonomous:
            self._check_autonomous(t, x[:1], theta[None, :])

    def _check_derivative_shapes(self, t: float, z: np.ndarray, theta: np.ndarray) -> None:
        """Each derivative callable of ``derivatives=`` at the first point (``z`` (1, N),
        ``theta`` (1, M)): a write into its arguments is refused as the functions' are
        (`probe`), and a wrong shape is a ValueError naming the key the user wrote, the
        shape expected of one sample (its axes) and the shape returned. A call that
        raises is left to the solver, which reports it."""
        N, M = z.shape[1], theta.shape[1]
        sizes = {"f": f"f (N = {N})", "z": f"z (N = {N})", "theta": f"theta (M = {M})"}
        zu, thu = (z, theta) if self.vectorized else (z[0], theta[0])
        for key, fn in self._known.items():
            which, dz, dth = key
            name = f"derivatives[{_key_name(key)!r}]"
            tk = self.q if which == "T" else t
            try:
                with np.errstate(all="ignore"):
                    out, _ = first_call(fn, name, which, tk, zu, thu)
            except Exception as exc:   # noqa: BLE001 - the solver reports it, as before
                if getattr(exc, "from_first_call", False):
                    raise
                continue
            writes_at_test_points(fn, name, which, tk, zu, thu)
            one = (N,) * ((which == "f") + dz) + (M,) * dth
            came = np.shape(out)
            if came == ((1,) + one if self.vectorized else one):
                continue
            axes = ([sizes["f"]] if which == "f" else []) + [sizes["z"]] * dz \
                + [sizes["theta"]] * dth
            if self.vectorized:
                want = "(B, " + ", ".join(map(str, one)) + ")"
                axes_text = (f"vectorized=True: the batch axis, then {', '.join(axes)}; B = 1 "
                             f"at this call")
            else:
                want, axes_text = str(one), f"one sample: {', '.join(axes)}"
            raise ValueError(f"`{name}` must return shape {want} ({axes_text}), but it "
                             f"returned shape {came}")

    def solver_warnings(self) -> list[SolverWarning]:
        """What every result of this problem reports about its functions: a scalar-``t``
        vectorised function (`invimbed._core.runtime.row_times`), a result narrower than float64
        (`invimbed._core.inputs.probe`)."""
        return (self._time_contract.warnings()
                + [precision_warning(n, d) for n, d in self.low_precision.items()])

    def _check_autonomous(self, t: float, z: np.ndarray, theta: np.ndarray) -> None:
        """Refute ``autonomous=True`` where a function changes with ``t``."""
        for name, fn in (("dynamics", self.dynamics), ("running_loss", self.running_loss)):
            if fn is None:
                continue
            args = (z, theta) if self.vectorized else (z[0], theta[0])
            values = [np.asarray(fn(s, *(a.copy() for a in args)), dtype=float)
                      for s in (t, t - 0.731, t + 1.913)]
            if not all(np.array_equal(values[0], v) for v in values[1:]):
                raise ValueError(
                    f"`autonomous=True` was declared, but `{name}` depends on t: it returns "
                    f"different values at t = {t}, {t - 0.731} and {t + 1.913} for the same z "
                    f"and theta; drop `autonomous=True`")


#: The names of the problem's functions in messages.
_FUNCTION_NAMES = {("f", 0, 0): "dynamics", ("R", 0, 0): "running_loss",
                   ("T", 0, 0): "terminal_loss"}



def _symbols(prov: Any, which: str, sep: str = "") -> str:
    """" a, b" (or ": a, b" with ``sep``): the provider's symbols, where it has them."""
    symbols = getattr(prov, which, None)
    if not isinstance(symbols, (tuple, list)) or not symbols:
        return ""
    return (sep or "") + " " + ", ".join(map(str, symbols))


def _key_name(key: tuple[str, int, int]) -> str:
    return derivative_name(*key)
