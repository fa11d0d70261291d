"""Compiled functions passed to the compiled adaptive sweep
(`invimbed._backends.sweep_adaptive`) as first-class function values: the user's
functions, the tape interpreter and the jet's right-hand side, each with its address
looked up once (numba's wrapper-address protocol). A function called through a function
value is compiled once; called directly, numba links and optimises its code again into
every caller (docs/performance.md, "Compiled kernels and the first run on a machine").
"""

from __future__ import annotations

from typing import Any

from ._numba import jet_rhs_signature
from ._numba_functions import _types


class _Address:
    """A compiled function passed to a kernel as a first-class function value, its address
    looked up once (numba's wrapper-address protocol): numba otherwise looks up every
    dispatcher's address at every call, about a millisecond for the 22 function values
    of this kernel. The address is looked up at the first call (which compiles the
    function where numba's cache does not hold it: those of `_calls` are compiled by
    `compile_loop`, announced)."""

    def __init__(self, dispatcher: Any, sig: Any) -> None:
        self.dispatcher, self.sig = dispatcher, sig
        self.address: int | None = None

    def __wrapper_address__(self) -> int:
        if self.address is None:
            from numba.experimental.function_type import _get_wrapper_address

            self.address = _get_wrapper_address(self.dispatcher, self.sig)
        return self.address

    def signature(self) -> Any:
        return self.sig


_ADDRESSES: dict[tuple, tuple] = {}


def _addressed(fns: tuple) -> tuple:
    """`_Address` of every function of ``fns`` (`function_tuple`), cached."""
    key = tuple(id(f) for f in fns)
    hit = _ADDRESSES.get(key)
    if hit is None or any(a.dispatcher is not f for a, f in zip(hit, fns)):
        from ._plans import BASE_KEYS

        sigs = _types()["sigs"]
        hit = _ADDRESSES[key] = tuple(_Address(f, sigs[k]) for f, k in zip(fns, BASE_KEYS))
    return hit


def row_signature() -> Any:
    """The numba signature of `invimbed._core.derivatives._taylor_numba.run_row` as the
    kernel calls it (a tape's ``ops``, ``par``, ``kind``, ``outputs``, ``t``, ``x``,
    ``order``, ``D``, the product table ``ptr``, ``ib``, ``io``, node storage ``W``,
    ``tmp``, ``out`` and bounds ``L``)."""
    from numba import types

    f8, i8 = types.float64, types.int64
    v, m, c3 = f8[::1], f8[:, ::1], f8[:, :, ::1]
    iv, im = i8[::1], i8[:, ::1]
    return types.void(im, v, types.int8[::1], iv, f8, v, i8, i8, iv, iv, iv, c3, m, c3, im)


def _callees() -> list[tuple[Any, Any]]:
    """The tape interpreter (`invimbed._core.derivatives._taylor_numba.run_row`) and the
    jet's right-hand side (`invimbed._backends._numba_kernels.jet_rhs`) with the
    signatures the kernel calls them with."""
    from .._core.derivatives._taylor_numba import run_row
    from ._numba_kernels import jet_rhs

    return [(run_row, row_signature()), (jet_rhs, jet_rhs_signature())]


def _calls() -> tuple:
    """`_callees` as function values: the kernel calls them through these, so that
    numba does not link and optimise their code again into each of the kernel's
    functions that call them (measured: a third of its compile time). Compiled with the
    kernel (`compile_loop`'s ``first``)."""
    hit = _ADDRESSES.get(("callees",))
    if hit is None:
        hit = _ADDRESSES[("callees",)] = tuple(_Address(d, sig) for d, sig in _callees())
    return hit


def rhs_signature(argtypes: tuple, ev_type: Any) -> Any:
    """The numba signature of `invimbed._backends._sweep_kernels._rhs` as
    `invimbed._backends._sweep_kernels.sweep_one` calls it (as a function value), for
    the kernel's argument types ``argtypes`` (`eval_signature`: functions, plan, ``cf``,
    `Tapes`, `Jet`, the three packed tables, `Grid`, ...) and the derivative evaluator's
    type ``ev_type``: ``(t, y, dy, ev, fns, plan, cf, tape, N, M, nw, CF, CW, xin, J,
    cZs, cVs, offs, ti, tf, tm, sc, W)``, the scratch ``sc`` and ``W`` as `sweep_one`
    builds them (the plan's scratch, the coefficients, `jet_scratch`'s ``ops``; the
    tapes' node storage and bounds)."""
    from numba import types

    f8, i8 = types.float64, types.int64
    C1, C2, C3 = f8[::1], f8[:, ::1], f8[:, :, ::1]
    I1, I2 = i8[::1], i8[:, ::1]
    fns, plan, cf, tape, jet, ti, tf, tm, grid = argtypes[:9]
    ops = jet_rhs_signature().args[12]
    sc = types.Tuple((C2, C2, C1, C2, C1, C1, C1, C1, C2, C1, C3, C2, ops, C2, C2, I1, I2, C1))
    W = types.Tuple((C3, C2, C3, C3, C2, C3, I2, I2, I1))
    jac = grid.types[2]
    return types.boolean(f8, C1, C1, ev_type, fns, plan, cf, tape, *jet.types[2:7], C1,
                         jac.copy(ndim=jac.ndim - 1), *jet.types[7:10], ti, tf, tm, sc, W)


def check_returns(dispatcher: Any, sig: Any) -> None:
    """Raise where ``dispatcher``, compiled for ``sig``'s arguments, returns another type
    than ``sig`` says: a kernel calling it as a function value of ``sig`` would read
    another layout (so it is never called)."""
    got = dispatcher.overloads[sig.args].signature.return_type
    if got != sig.return_type:
        raise RuntimeError(f"internal error: {dispatcher.py_func.__name__} returns {got}, "
                           f"its function type says {sig.return_type}")
