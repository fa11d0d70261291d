"""The solvers' settings as objects: `Accuracy`, `Closure` and `Integrator`.

Each is a frozen dataclass checked once, when it is made (`__post_init__`), with the
messages of the keywords it stands for ("`rtol` must be a positive finite number, but
got ..."). The solvers take either the keywords they always took (``tol=``, ``rtol=``,
``closure="jet"``, ``order=``, ``method="RK45"``, ``step=``, ``max_steps=``, ...) or these
objects (``accuracy=``, ``closure=Closure(...)``, ``integrator=``); `settle` reads the
two into one object, refusing a keyword that sets a field of a given object differently.
The object is then carried in the solve's `Setup` and read there; the solvers'
documentation: docs/method.md, "Settings as objects".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..closures import CLOSURES
from ..integrators import ALL_METHODS, FIXED_METHODS, SCIPY_METHODS
from ..inputs.validation import (SOLVE_IVP_OPTIONS, STEP_BUDGET, as_bool, as_float_array,
                                 as_int, as_ivp_options, check_choice, check_positive,
                                 describe)

#: Relative error estimate above which a depth is not converged when no ``tol`` is given
#: (relative to ``max(1, |field|)``): the default accuracy rule, `Accuracy.scale`.
WARN_RELATIVE_ERROR = 0.1


def _tol(value: Any) -> tuple[float, float] | None:
    """``tol`` as ``(rtol, atol)``: a float ``t`` means ``(t, t)``; None stays None."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2:
        pair = tuple(value)
    elif np.ndim(value) == 0 and not isinstance(value, (bool, str)):
        pair = (value, value)
    else:
        raise ValueError(f"`tol` must be a positive float or an (rtol, atol) pair, but got "
                         f"{describe(value)}")
    out = []
    for name, v in zip(("rtol", "atol"), pair):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not np.isfinite(v) or v < 0:
            raise ValueError(f"`tol` must be a positive float or an (rtol, atol) pair of "
                             f"non-negative floats, but its {name} is {describe(v)}")
        out.append(float(v))
    if out[0] == out[1] == 0.0:
        raise ValueError("`tol` must not be (0, 0): nothing but an exact answer would pass")
    return out[0], out[1]


def _tol_as_given(value: Any) -> float | tuple[float, float] | None:
    """``tol`` checked (`_tol`), kept as given: a float, or a pair of floats."""
    pair = _tol(value)
    if pair is None or isinstance(value, (tuple, list)):
        return pair
    return pair[0]


def _positive(name: str) -> Callable[[Any], float | None]:
    return lambda v: check_positive(v, name, allow_none=True)


def _fallback(value: Any) -> str | None:
    return None if value is None else check_choice(value, "fallback", ("adjoint",))


class _Settings:
    """What the three settings share: each field's check (``_CHECKS``, run on every field
    by `__post_init__` and on a keyword by `settle`), then the checks across fields."""

    _CHECKS: dict[str, Callable[[Any], Any]] = {}

    def __post_init__(self) -> None:
        for name, check in self._CHECKS.items():
            object.__setattr__(self, name, check(getattr(self, name)))
        self._check_together()

    def _check_together(self) -> None:
        pass

    @classmethod
    def _meaning(cls, name: str, value: Any) -> Any:
        """What the field's value means, for comparing two spellings of it."""
        return value

    def __repr__(self) -> str:
        """The fields that differ from the defaults: ``Accuracy(tol=1e-06)``."""
        set_ = ", ".join(f"{k}={v!r}" for k, v in self.given_fields().items())
        return f"{type(self).__name__}({set_})"

    def given_fields(self) -> dict[str, Any]:
        """The fields that differ from the class's defaults."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if not _same(getattr(self, f.name), f.default)}


@dataclass(frozen=True, repr=False)
class Accuracy(_Settings):
    """How accurate a solve must be, and how the sweep gets there.

    Parameters
    ----------
    tol : float or (float, float), optional
        The target ``(rtol, atol)`` every field's error estimate must meet (a float ``t``
        means ``(t, t)``: `target`); the sweep raises the jet order where it
        pays, under the ratio test (docs/accuracy.md). ``solve_ocp``: the KKT tolerance
        of its optimality check (one float; default 1e-6). None: the default rule, an
        estimate within 10% of ``max(1, |field|)``.
    rtol, atol : float, optional
        The integrator's tolerances; None: the solver's default (`solve_imbedding`
        derives them from ``tol``: docs/accuracy.md).
    max_order : int, default 6
        With ``tol``: the highest jet order the sweep may raise ``order`` to.
    ratio_test : bool, default True
        Refuse depths whose jet series does not visibly converge (docs/accuracy.md, "The
        estimate, and when it is refused").
    fallback : {None, "adjoint"}
        Recompute what did not converge with the exact `solve_adjoint`.

    Raises
    ------
    TypeError, ValueError
        Naming the field (as the solvers' keyword of the same name), what was expected
        and what came.

    Examples
    --------
    >>> import invimbed
    >>> invimbed.Accuracy(tol=1e-6).target
    (1e-06, 1e-06)
    """

    tol: float | tuple[float, float] | None = None
    rtol: float | None = None
    atol: float | None = None
    max_order: int = 6
    ratio_test: bool = True
    fallback: str | None = None

    _CHECKS = {"tol": _tol_as_given, "rtol": _positive("rtol"), "atol": _positive("atol"),
               "max_order": lambda v: as_int(v, "max_order", minimum=1),
               "ratio_test": lambda v: as_bool(v, "ratio_test"), "fallback": _fallback}

    @classmethod
    def _meaning(cls, name: str, value: Any) -> Any:
        return _tol(value) if name == "tol" else value

    @property
    def target(self) -> tuple[float, float] | None:
        """``tol`` as ``(rtol, atol)``, or None."""
        return _tol(self.tol)

    @property
    def checked(self) -> bool:
        """Whether a target ``tol`` is set (otherwise the default 10% rule judges)."""
        return self.tol is not None

    def scale(self, field: np.ndarray) -> np.ndarray:
        """What one unit of error is for the values ``field``: ``atol + rtol |field|``
        of ``tol``, or 10% of ``max(1, |field|)`` without it (`WARN_RELATIVE_ERROR`)."""
        target = self.target
        if target is None:
            return WARN_RELATIVE_ERROR * np.maximum(np.abs(field), 1.0)
        return target[1] + target[0] * np.abs(field)

    def criterion(self, name: str = "F") -> str:
        """The rule `scale` applies, in words, for a message (``name``: the field)."""
        target = self.target
        if target is None:
            return f"the default 10% of max(1, |{name}|)"
        return f"tol = (rtol {target[0]:.3g}, atol {target[1]:.3g})"

    def derived(self, rtol_scale: tuple[float, ...], atol_scale: tuple[float, ...],
                rtol_range: tuple[float, float],
                atol_range: tuple[float, float]) -> tuple[float, float]:
        """An integrator's ``(rtol, atol)`` derived from ``tol``: each part (the other
        where it is 0) multiplied by the factors of its scale in turn, then clipped to its
        range ``(lo, hi)``."""
        tol = self.target
        if tol is None:
            raise ValueError("no `tol` to derive tolerances from")
        out = []
        for t, factors, (lo, hi) in ((tol[0] if tol[0] > 0 else tol[1], rtol_scale, rtol_range),
                                     (tol[1] if tol[1] > 0 else tol[0], atol_scale, atol_range)):
            for factor in factors:
                t = factor * t
            out.append(min(hi, max(lo, t)))
        return out[0], out[1]

    def with_tolerances(self, rtol: float, atol: float) -> "Accuracy":
        """This accuracy with ``rtol`` and ``atol`` filled in where it leaves them None."""
        return dataclasses.replace(self, rtol=rtol if self.rtol is None else self.rtol,
                                   atol=atol if self.atol is None else self.atol)


def _delta(value: Any) -> Any:
    """A stencil spacing: None, a positive float, or nested tuples of them (an array's
    values; its shape is checked against ``x`` by the solver)."""
    if value is None:
        return None
    arr = as_float_array(value, "delta")
    if arr.ndim > 2 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"`delta` must be positive and finite, a float or an array of shape "
                         f"(N,) or (B, N), but got {describe(value)}")
    return float(arr) if arr.ndim == 0 else _frozen(arr.tolist())


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


@dataclass(frozen=True, repr=False)
class Closure(_Settings):
    """How the sweep closes the nested Jacobians (docs/theory.md, "The closures").

    Parameters
    ----------
    kind : {"jet", "stencil", "crop"}, default "jet"
        The closure; ``closure="jet"`` is the shorthand for ``Closure(kind="jet")``.
    order : int, default 1
        Jet order ``K`` (the paper's closure of Theorem 1 carried to ``K``); jet only.
    estimate_error : bool, default True
        Carry the jet of order ``K + 1`` and report the difference (``error_estimate``).
    difference : {"central", "forward"}, default "central"
        The stencil's difference quotient.
    delta : float or array_like, optional
        The stencil's spacing (``kind="stencil"`` only): a float, (N,) or (B, N).

    Raises
    ------
    TypeError, ValueError
        For a bad field, named as the solvers' keyword (``closure`` for ``kind``); an
        ``order`` other than 1 or a ``delta`` where the closure does not read it.

    Examples
    --------
    >>> import invimbed
    >>> invimbed.Closure(kind="jet", order=2).order
    2
    """

    kind: str = "jet"
    order: int = 1
    estimate_error: bool = True
    difference: str = "central"
    delta: Any = None

    _CHECKS = {"kind": lambda v: check_choice(v, "closure", CLOSURES),
               "order": lambda v: as_int(v, "order", minimum=1),
               "estimate_error": lambda v: as_bool(v, "estimate_error"),
               "difference": lambda v: check_choice(v, "difference", ("central", "forward")),
               "delta": _delta}

    def _check_together(self) -> None:
        if self.kind != "jet" and self.order != 1:
            raise ValueError(f"`order` applies to closure='jet' only; closure={self.kind!r} "
                             f"needs order=1, but got order={self.order}")
        if self.delta is not None and self.kind != "stencil":
            raise ValueError(f"`delta` is the spacing of closure='stencil' only, but got "
                             f"closure={self.kind!r} with delta={describe(self.delta)}; "
                             f"drop `delta`")


def _ivp_option(name: str) -> Callable[[Any], Any]:
    return lambda v: None if v is None else as_ivp_options({name: v}, "Integrator")[name]


@dataclass(frozen=True, repr=False)
class Integrator(_Settings):
    """The integrator in depth (or, for `solve_ocp`, in time).

    Parameters
    ----------
    method : str, default "RK45"
        A scipy method (``"RK45"``, ``"RK23"``, ``"DOP853"``, ``"Radau"``, ``"BDF"``,
        ``"LSODA"``), fixed-step ``"euler"``/``"midpoint"``/``"rk4"`` (with ``step``), or
        ``"disc"``, the paper's discrete architecture (eqs. (14), (15)); each solver
        takes the subset its docstring names. ``method="RK45"`` is the shorthand for
        ``Integrator(method="RK45")``.
    step : float, optional
        Largest step of the fixed-step methods (required by them); ``max_step`` of the
        scipy methods.
    max_steps : int, optional
        Attempted steps per solve (default 10,000).
    first_step, max_step, min_step : float, optional
        As in `scipy.integrate.solve_ivp` (adaptive methods only).

    Raises
    ------
    ValueError, TypeError
        For a bad field, named; a fixed-step method without ``step``, or an option the
        method would ignore (``first_step`` with ``"rk4"``, ``step`` and ``max_step``).

    Examples
    --------
    >>> import invimbed
    >>> invimbed.Integrator(method="rk4", step=0.01).options
    {}
    """

    method: str = "RK45"
    step: float | None = None
    max_steps: int | None = None
    first_step: float | None = None
    max_step: float | None = None
    min_step: float | None = None

    _CHECKS = {"method": lambda v: check_choice(v, "method", ALL_METHODS),
               "step": _positive("step"), STEP_BUDGET: _ivp_option(STEP_BUDGET),
               **{k: _ivp_option(k) for k in SOLVE_IVP_OPTIONS}}

    def _check_together(self) -> None:
        method, step = self.method, self.step
        if method in FIXED_METHODS and method != "disc" and step is None:
            raise ValueError(f"`step` is required for the fixed-step method {method!r}: give "
                             f"the largest step in depth, e.g. step=0.01; got step=None")
        if method not in FIXED_METHODS:
            if step is not None and self.max_step is not None:
                raise ValueError(f"give either `step` or `max_step` (both set the largest "
                                 f"step of method={method!r}), but got step={step!r} and "
                                 f"max_step={self.max_step!r}")
            return
        adaptive = [k for k in SOLVE_IVP_OPTIONS if getattr(self, k) is not None]
        if adaptive:
            names = ", ".join(f"`{k}`" for k in adaptive)
            one = len(adaptive) == 1
            raise ValueError(f"{names} appl{'ies' if one else 'y'} to scipy's adaptive "
                             f"methods ({', '.join(map(repr, SCIPY_METHODS))}) only, but "
                             f"got method={method!r}, whose steps are set by `step`; drop "
                             f"{'it' if one else 'them'}")

    @property
    def options(self) -> dict[str, Any]:
        """The options given beyond ``method`` and ``step`` (``max_steps``,
        ``first_step``, ``max_step``, ``min_step``), as the integrators take them."""
        return {k: getattr(self, k) for k in (*SOLVE_IVP_OPTIONS, STEP_BUDGET)
                if getattr(self, k) is not None}


_SCALARS = (str, int, float, np.number)


def _same(a: Any, b: Any) -> bool:
    """Whether two settings' values are the same (arrays by value; 1 is not True)."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    if isinstance(a, (bool, np.bool_)) != isinstance(b, (bool, np.bool_)):
        return False
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        return bool(a == b)
    try:
        return bool(np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object)))
    except (TypeError, ValueError):
        return a == b


def settle(cls: type, given: Any, keywords: Mapping[str, tuple[Any, Any]], *, argument: str,
           unused: tuple[str, ...] = (), caller: str = "",
           choices: Mapping[str, tuple[str, ...]] | None = None) -> Any:
    """One settings object of ``cls`` from a solver's object argument and its keywords.

    Parameters
    ----------
    cls : type
        `Accuracy`, `Closure` or `Integrator`.
    given : cls instance or None
        The object the caller passed (``argument=``, e.g. ``accuracy=``).
    keywords : mapping
        ``{field: (value, default)}`` of the caller's keywords: a keyword whose value is
        its default defers to ``given``; one that is not sets the field, and must agree
        with ``given`` where ``given`` sets it (a field of ``given`` at the class's
        default, None or not, is not set).
    argument : str
        The object argument's name, for the messages.
    unused : tuple of str
        Fields the caller does not read: ``given`` must leave them at their defaults.
    caller : str
        The solver's name, for the message about ``unused``.
    choices : mapping, optional
        ``{field: values}``: the values of a field the caller takes, checked on the keyword
        and on ``given`` first (``method="euler"`` is refused naming the caller's methods).

    Returns
    -------
    cls
        Checked once (`__post_init__`).

    Raises
    ------
    TypeError
        If ``given`` is not a ``cls``.
    ValueError
        Naming the keyword and ``argument`` where they set a field differently, or a field
        of ``unused`` that ``given`` sets.
    """
    if given is not None and not isinstance(given, cls):
        raise TypeError(f"`{argument}` must be an invimbed.{cls.__name__}, but got "
                        f"{describe(given)}")
    base = {} if given is None else {f.name: getattr(given, f.name)
                                     for f in dataclasses.fields(cls)}
    for name, values in (choices or {}).items():
        value, default = keywords.get(name, (None, None))
        if not _same(value, default):
            check_choice(value, _keyword(cls, name), values)
        if given is not None:
            check_choice(getattr(given, name), f"{argument}.{name}", values)
    chosen = {}
    for name, (value, default) in keywords.items():
        if _same(value, default):
            continue
        value = cls._CHECKS[name](value)
        mine = None if given is None else getattr(given, name)
        if mine is not None and not _same(mine, _default(cls, name)) and not _same(
                cls._meaning(name, mine), cls._meaning(name, value)):
            raise ValueError(
                f"`{_keyword(cls, name)}={value!r}` and `{argument}={given!r}` set `{name}` "
                f"differently ({value!r} and {mine!r}); give it once, as the "
                f"keyword or in the {cls.__name__}")
        chosen[name] = value
    out = cls(**{**base, **chosen})
    extra = [n for n in unused if n in out.given_fields()]
    if extra:
        raise ValueError(f"{caller or 'this solver'} does not use "
                         f"{', '.join(f'`{argument}.{n}`' for n in extra)}; leave "
                         f"{'it' if len(extra) == 1 else 'them'} at the default "
                         f"({', '.join(f'{n}={_default(cls, n)!r}' for n in extra)})")
    return out


def _keyword(cls: type, name: str) -> str:
    """The solvers' keyword for the field ``name`` (``Closure.kind`` is ``closure``)."""
    return "closure" if (cls is Closure and name == "kind") else name


def _default(cls: type, name: str) -> Any:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def closure_keywords(closure: Any, **keywords: tuple[Any, Any]) -> tuple[Any, dict]:
    """``(given, keywords)`` for `settle` of `Closure` from a solver's ``closure``
    argument: a `Closure` is the object; a string is the ``kind`` keyword (default
    "jet"), the shorthand ``closure="jet"``."""
    if isinstance(closure, Closure):
        return closure, keywords
    return None, {"kind": (closure, "jet"), **keywords}
