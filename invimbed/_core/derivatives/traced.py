"""The symbolic provider of a problem's traced functions: `trace_problem` traces
``dynamics``, ``running_loss`` and ``terminal_loss`` (`invimbed._core.derivatives.tracing`)
and verifies the trace against the functions themselves before it is used
(`TracedProvider.verify`); docs/derivatives.md says which ways of writing a problem
trace.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .base import DerivativeProvider, derivative_name
from .symbolic import SympyProvider
from .tracing import AGREEMENT, MAX_OPERATIONS, TraceError, _STATE, _sympy, trace_function


#: How closely a derivative the problem gives must equal the traced one for the traced
#: one to stand in for it (`CompletedProvider.trace_agrees`), relative to max(1, |value|).
GIVEN_AGREEMENT = 1e-10
#: The string values of ``derivatives=`` of `invimbed.BolzaProblem`.
MODES = ("auto", "trace", "finite-differences")
FD_REQUESTED = "finite differences (derivatives='finite-differences')"
#: `invimbed.BolzaProblem.derivative_source` before the first solve, by mode
PENDING = {"auto": "auto: traced at the first solve, else finite differences",
           "trace": "trace: traced at the first solve", "finite-differences": FD_REQUESTED}


def traced_provider(problem: Any, functions: dict[str, Callable], n_state: int,
                    n_theta: int, known: dict[tuple[str, int, int], Callable] | None = None
                    ) -> tuple["DerivativeProvider | None", str]:
    """The traced provider of ``problem`` where its ``derivative_mode`` asks for one and
    tracing succeeds, and the problem's `derivative_source` for the solve; ``None`` for
    finite differences. ``derivatives="trace"`` raises ``ValueError`` where it fails.

    ``known``: the problem's derivative callables (batched), where it gives some; the
    provider is then a `CompletedProvider` (the user's derivatives, the traced ones for
    the rest), and where tracing fails the rest are finite differences."""
    if problem.derivative_mode == "finite-differences":
        return None, FD_REQUESTED
    prov, why = trace_problem(problem.dynamics, problem.running_loss, problem.terminal_loss,
                              problem.vectorized, functions, n_state, n_theta, problem.q)
    if prov is not None:   # as `BolzaProblem.provider` builds its finite differences
        prov._absent = tuple(w for w in "RT" if getattr(
            problem, {"R": "running_loss", "T": "terminal_loss"}[w]) is None)
        if known:
            prov = CompletedProvider(prov, functions, known)
        return prov, prov.derivative_source
    if known:
        return None, f"{user_names(known)}; the rest by finite differences (tracing failed: {why})"
    if problem.derivative_mode == "trace":
        raise ValueError(f"`derivatives='trace'`: {why}; write the functions with numpy "
                         f"operations and no branches on values, or use "
                         f"derivatives='auto' (finite differences)")
    return None, f"finite differences (tracing failed: {why})"


def user_names(known: Any) -> str:
    """``"user: f_z, T_z"``: the derivatives a problem gives, by name, sorted."""
    return "user: " + ", ".join(sorted(derivative_name(*k) for k in known))


def trace_problem(dynamics: Callable, running_loss: Callable | None,
                  terminal_loss: Callable | None, vectorized: bool,
                  functions: dict[str, Callable], n_state: int, n_theta: int,
                  q: float) -> tuple["TracedProvider | None", str]:
    """Trace a problem's functions and verify the trace (see the module docstring).

    ``functions`` are the problem's batched callables ``g(t, z (B, N), theta (B, M))``
    (for the verification). Returns ``(provider, "")``, or ``(None, reason)`` where
    tracing failed or the trace was refused."""
    import time
    import warnings

    start = time.perf_counter()
    try:
        sp = _sympy()
    except ImportError:
        return None, "sympy is not installed (pip install invimbed[symbolic])"
    t = sp.Symbol("t", real=True)
    z = tuple(sp.Symbol(f"z{i}", real=True) for i in range(n_state))
    th = tuple(sp.Symbol(f"theta{k}", real=True) for k in range(n_theta))
    exprs: dict[str, Any] = {}
    _STATE["left"] = MAX_OPERATIONS
    for which, fn in (("f", dynamics), ("R", running_loss), ("T", terminal_loss)):
        if fn is None:
            continue
        name = {"f": "dynamics", "R": "running_loss", "T": "terminal_loss"}[which]
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                got = trace_function(fn, which, vectorized, t, z, th)
        except TraceError as exc:
            return None, f"`{name}` could not be traced: {exc}"
        except Exception as exc:  # the user's code on object arrays: any error
            return None, f"`{name}` could not be traced ({type(exc).__name__}: {exc})"
        exprs[which] = got if which == "f" else got[0]
    try:
        prov = TracedProvider(t, z, th, exprs["f"], exprs.get("R"), exprs.get("T"),
                              functions=functions)
    except (TypeError, ValueError) as exc:   # e.g. T uses t: the provider refuses it
        return None, f"the traced expressions were refused ({exc})"
    reason = prov.verify(q)
    if reason:
        return None, reason
    prov.trace_seconds = time.perf_counter() - start
    return prov, ""


class TracedProvider(SympyProvider):
    """The symbolic provider of a problem's traced functions (`trace_problem`); exact
    derivatives of every order, the generated code of `SympyProvider`."""

    name = "traced (sympy) provider"
    derivative_source = "exact: the problem's functions traced into sympy"
    #: `invimbed.BolzaProblem.provider` re-checks it at every solve (`still_matches`)
    traced = True

    def __init__(self, *args: Any, functions: dict[str, Callable], absent: tuple = (),
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.functions = functions
        self._absent = absent
        self.trace_seconds = float("nan")
        self._probe: tuple | None = None

    def finite_differences(self) -> Any:
        """The problem's own functions with finite differences (what ``backend="cupy"``
        runs: the generated code is numpy's)."""
        from .finite_difference import FiniteDifferences

        prov = FiniteDifferences(self.functions, self.n_state, self.n_theta, zero=self._absent)
        prov.derivative_source = "finite differences (backend='cupy' runs the functions)"
        return prov

    def _user(self, which: str, t: float, z: np.ndarray, th: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(self.functions[which](t, z, th), dtype=float)

    def verify(self, q: float) -> str:
        """Compare the generated code with the problem's functions at random points and
        two times (`AGREEMENT`); the reason for refusing the trace, or ``""``."""
        rng = np.random.default_rng(7)
        N, M = self.n_state, self.n_theta
        Z = np.concatenate([rng.uniform(0.2, 1.3, (2, N)), rng.normal(size=(2, N))])
        TH = np.concatenate([rng.uniform(0.2, 1.3, (2, M)), rng.normal(size=(2, M))])
        times = (q - 0.375, q - 0.8125)
        probe: dict[str, np.ndarray] = {}
        for which in ("f", "R", "T"):
            user, mine = [], []
            for t in times[:1] if which == "T" else times:
                for b in range(Z.shape[0]):
                    zb, tb = Z[b:b + 1], TH[b:b + 1]
                    try:
                        u = self._user(which, t, zb, tb)
                    except Exception:    # a point outside the function's domain
                        continue
                    with np.errstate(all="ignore"):
                        m = self.derivative(which, t, zb, tb)
                    if b == 0 and t == times[0]:
                        probe[which] = u
                    user.append(u.reshape(-1))
                    mine.append(np.asarray(m, dtype=float).reshape(-1))
            name = {"f": "dynamics", "R": "running_loss", "T": "terminal_loss"}[which]
            u, m = np.array(user), np.array(mine)
            finite = np.isfinite(u)
            if u.size == 0 or not np.any(np.all(finite, axis=1)) or which not in probe:
                return (f"the trace of `{name}` could not be verified: no test point where "
                        f"the function is finite")
            if not np.array_equal(finite, np.isfinite(m)):
                return f"the trace of `{name}` disagrees with the function (non-finite values)"
            scale = float(np.max(np.abs(u[finite]))) if np.any(finite) else 0.0
            err = float(np.max(np.abs(u[finite] - m[finite]))) if np.any(finite) else 0.0
            if not err <= AGREEMENT * scale:
                return (f"the trace of `{name}` disagrees with the function by {err:.3g} "
                        f"(relative {err / scale if scale else float('inf'):.3g} > "
                        f"{AGREEMENT:g}): it depends on something tracing cannot see")
        self._probe = (times[0], Z[:1], TH[:1], probe)
        return ""

    def still_matches(self) -> bool:
        """Whether the problem's functions still return, at the verification's first
        point, exactly what they returned when traced."""
        if self._probe is None:
            return False
        t, z, th, values = self._probe
        try:
            return all(np.array_equal(self._user(w, t, z, th), v, equal_nan=True)
                       for w, v in values.items())
        except Exception:
            return False


class CompletedProvider(DerivativeProvider):
    """The derivatives a problem gives (``derivatives={"f_z": ...}``), completed by its
    traced functions: ``f``, ``R``, ``T`` and every derivative given are the user's
    callables; every other derivative is the traced provider's exact one
    (docs/derivatives.md). What ``backend="numba"`` compiles: the user's per-sample
    functions where given, the generated per-sample code (`sample_function`) for the
    rest, so that no derivative is differenced inside its kernels."""

    name = "user derivatives, the rest traced (sympy)"
    exact_derivatives = True     # the numba backend's plans difference nothing
    max_order = None
    row_times = True             # the user's batched callables and the generated code
    traced = True                # `invimbed.BolzaProblem.provider` re-checks the trace

    def __init__(self, traced: TracedProvider, functions: dict[str, Callable],
                 known: dict[tuple[str, int, int], Callable]) -> None:
        self.traced_part = traced
        self.functions = functions
        self.known = dict(known)
        self.n_state, self.n_theta = traced.n_state, traced.n_theta
        self.derivative_source = f"{user_names(known)}; the rest exact: traced into sympy"
        self.trace_seconds = traced.trace_seconds
        self._agrees: bool | None = None

    def _derivative(self, which, t, z, theta, dz, dth):
        fn = self.known.get((which, dz, dth))
        if fn is None and dz + dth == 0 and which not in self.traced_part._absent:
            fn = self.functions[which]
        if fn is None:
            return self.traced_part.derivative(which, t, z, theta, dz, dth)
        return np.asarray(fn(t, z, theta), dtype=float)

    def sample_function(self, which: str, dz: int = 0, dth: int = 0) -> Callable:
        """The traced derivative's generated per-sample code
        (`SympyProvider.sample_function`)."""
        return self.traced_part.sample_function(which, dz, dth)

    def still_matches(self) -> bool:
        return self.traced_part.still_matches()

    def time_free(self) -> bool:
        """Whether the traced ``f`` and ``R`` have no ``t`` (`SympyProvider.time_free`):
        the trace is of the problem's own functions (verified at two times), and the
        derivatives given are derivatives of those (checked at the first point), so
        none of them depends on ``t`` either."""
        return self.traced_part.time_free()

    def trace_agrees(self) -> bool:
        """Whether every derivative the problem gives equals the traced one, to
        `GIVEN_AGREEMENT` relative to ``max(1, |value|)``, at the points of
        `TracedProvider.verify`: where it does, ``backend="numba"`` may run the
        problem's generated jet code (`invimbed._core.derivatives._jet_code`), which
        computes every derivative from the trace; where not, the given ones are called.
        Checked once."""
        if self._agrees is None:
            self._agrees = all(self._agrees_on(key) for key in self.known)
        return self._agrees

    def _agrees_on(self, key: tuple[str, int, int]) -> bool:
        which, dz, dth = key
        tr = self.traced_part
        rng = np.random.default_rng(7)      # the points of `TracedProvider.verify`
        N, M = self.n_state, self.n_theta
        Z = np.concatenate([rng.uniform(0.2, 1.3, (2, N)), rng.normal(size=(2, N))])
        TH = np.concatenate([rng.uniform(0.2, 1.3, (2, M)), rng.normal(size=(2, M))])
        t0 = tr._probe[0] if tr._probe is not None else 0.0
        for t in (t0, t0 - 0.4375):         # the two times of the verification
            try:
                with np.errstate(all="ignore"):
                    given = np.asarray(self.known[key](t, Z, TH), dtype=float)
                    mine = np.asarray(tr.derivative(which, t, Z, TH, dz, dth), dtype=float)
            except Exception:   # noqa: BLE001 - the user's code outside its domain
                return False
            scale = GIVEN_AGREEMENT * np.maximum(1.0, np.abs(mine))
            if given.shape != mine.shape or not np.all(np.abs(given - mine) <= scale):
                return False
        return True

    def finite_differences(self) -> Any:
        """The user's functions and derivatives with finite differences for the rest
        (what ``backend="cupy"`` runs: the generated code is numpy's)."""
        from .finite_difference import FiniteDifferences

        tr = self.traced_part
        prov = FiniteDifferences(self.functions, self.n_state, self.n_theta, known=self.known,
                                 zero=tr._absent)
        prov.derivative_source = (f"{user_names(self.known)}; the rest by finite differences "
                                  f"(backend='cupy' runs the functions)")
        return prov
