"""The registry of backends: the core asks it, and never imports a backend itself.

The core runs ``backend="numpy"`` on its own. Every other backend registers what it
provides with `register_backend` (`invimbed._backends` does, when the package is
imported), and the solvers fetch it with `get_backend`, which refuses an unknown name,
or a backend that does not provide that kind of solve, with one message naming the
argument, what it may be and what came.

Kinds
-----
``"sweep"``
    ``run(backend, setup, *, closure, order, method, step, difference, delta,
    estimate_error, rtol, atol, **options) -> ImbeddingResult``: the fixed-step sweep of
    `invimbed.solve_imbedding`.
``"sweep_adaptive"``
    ``run(setup, *, closure, order, method, rtol, atol, est, accuracy, warnings_,
    look_ahead, finish, **options) -> ImbeddingResult``: the adaptive jet sweep
    (``method="RK45"`` or ``"RK23"``, `invimbed._backends.sweep_adaptive`).
``"ensemble"``
    ``(run, row_cost)``: the ensemble of `invimbed.solve_adjoint`,
    ``run(setup, method, rtol, atol, options)`` and its per-row cost in bytes.
"""

from __future__ import annotations

from typing import Any, Callable

from ..inputs.validation import check_choice

#: Every backend's name, the core's own first.
BACKENDS = ("numpy", "numba", "cupy", "cuda")
#: The kinds of solve a backend may provide.
KINDS = ("sweep", "sweep_adaptive", "ensemble")
#: What each kind is, in messages.
_WHAT = {"sweep": "the imbedding sweep", "sweep_adaptive": "the adaptive imbedding sweep "
         "(method='RK45' or 'RK23')", "ensemble": "the ensemble of solve_adjoint"}

_REGISTRY: dict[tuple[str, str], Callable[[], Any]] = {}


def register_backend(name: str, kind: str, factory: Callable[[], Any]) -> None:
    """Register ``factory`` as backend ``name``'s provider of ``kind`` (one of `KINDS`).

    ``factory()`` returns the implementation; it is called at each `get_backend`, so a
    backend imports its heavy dependency there, and an `ImportError` naming the extra to
    install reaches the user only when the backend is asked for."""
    check_choice(name, "name", BACKENDS[1:])
    check_choice(kind, "kind", KINDS)
    if not callable(factory):
        raise TypeError(f"`factory` must be callable, but got {factory!r}")
    _REGISTRY[(name, kind)] = factory


def backends_for(kind: str) -> tuple[str, ...]:
    """The backends that run ``kind``: ``"numpy"`` (the core's own, for ``"sweep"`` and
    ``"ensemble"``) and those registered, in the order of `BACKENDS`."""
    check_choice(kind, "kind", KINDS)
    own = ("numpy",) if kind != "sweep_adaptive" else ()
    return own + tuple(b for b in BACKENDS[1:] if (b, kind) in _REGISTRY)


def check_backend(name: Any, kind: str, argument: str = "backend") -> str:
    """``name`` if it runs ``kind``; otherwise a ValueError naming ``argument``, the
    backends that run it and what came."""
    choices = backends_for(kind)
    if not isinstance(name, str) or name not in choices:
        other = (f" ({name!r} does not run {_WHAT[kind]})"
                 if isinstance(name, str) and name in BACKENDS else "")
        raise ValueError(f"`{argument}` must be one of {', '.join(map(repr, choices))}, but "
                         f"got {name!r}{other}")
    return name


def get_backend(name: Any, kind: str, argument: str = "backend") -> Any:
    """Backend ``name``'s implementation of ``kind`` (`check_backend` first)."""
    check_backend(name, kind, argument)
    if name == "numpy":
        raise ValueError(f"`{argument}`='numpy' is the core's own {_WHAT[kind]}; it has no "
                         f"registered implementation")
    return _REGISTRY[(name, kind)]()


__all__ = ["BACKENDS", "KINDS", "backends_for", "check_backend", "get_backend",
           "register_backend"]
