"""The kernels' packed arguments, unpacked (numba; imported only where numba is
installed): views of the buffers of `invimbed._backends._bundles.pack`, the same arrays,
of the same numba types, as the unpacked ones (docs/performance.md, "Compiled kernels
and the first run on a machine": each array of a tuple argument costs compile time in
every call and ``prange`` loop it passes through). `order_tables` gives the jet's index
tables of one carried order (`invimbed._backends._numba.packed_tables`), `tape_arrays`
and `tape_plan` the Taylor tapes of `invimbed._backends._bundles.Tapes`. Compiled once
per machine (``cache=True``).
"""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def _ints(ti, m):
    """The 1-D int64 array of ``ti`` that ``m = (start, rows, 0)`` locates (a view: the
    buffers of `invimbed._backends._bundles.pack`)."""
    return ti[m[0]:m[0] + m[1]]


@njit(cache=True)
def _ints2(ti, m):
    """The 2-D int64 array of ``ti`` that ``m = (start, rows, columns)`` locates."""
    return ti[m[0]:m[0] + m[1] * m[2]].reshape((m[1], m[2]))


@njit(cache=True)
def _floats(tf, m):
    """The 1-D float array of ``tf`` that ``m = (start, rows, 0)`` locates."""
    return tf[m[0]:m[0] + m[1]]


@njit(cache=True)
def _int8s(tk, m):
    """The 1-D int8 array of ``tk`` that ``m = (start, rows, 0)`` locates."""
    return tk[m[0]:m[0] + m[1]]


@njit(cache=True)
def _floats2(tf, m):
    """The 2-D float array of ``tf`` that ``m = (start, rows, columns)`` locates."""
    return tf[m[0]:m[0] + m[1] * m[2]].reshape((m[1], m[2]))


@njit(cache=True)
def order_tables(ti, tf, tm, o):
    """The 18 tables of `jet_rhs` (`invimbed._backends._numba._jet_tables`) of the
    ``o``-th order packed in ``(ti, tf, tm)`` (`invimbed._backends._numba.packed_tables`):
    views, the same arrays as the unpacked tables."""
    m = tm[o]
    return (_ints2(ti, m[0]), _floats2(tf, m[1]), _ints(ti, m[2]), _ints(ti, m[3]),
            _ints(ti, m[4]), _ints2(ti, m[5]), _floats2(tf, m[6]), _ints(ti, m[7]),
            _ints(ti, m[8]), _ints(ti, m[9]), _ints(ti, m[10]), _ints(ti, m[11]),
            _ints(ti, m[12]), _ints(ti, m[13]), _ints(ti, m[14]), _ints(ti, m[15]),
            _ints2(ti, m[16]), _ints2(ti, m[17]))


@njit(cache=True)
def tape_arrays(tape, k):
    """``(ops, par, kind, outputs)`` of tape ``k`` (0: ``f``, 1: ``R``, 2: ``T``) of the
    `invimbed._backends._bundles.Tapes` ``tape``: views of its packed arrays."""
    m = tape.meta
    return (_ints2(tape.ints, m[4 * k]), _floats(tape.flts, m[4 * k + 1]),
            _int8s(tape.kinds, m[4 * k + 2]), _ints(tape.ints, m[4 * k + 3]))


@njit(cache=True)
def tape_plan(tape):
    """The product table ``(ptr, ib, io)`` of the `Tapes` ``tape`` (views)."""
    m = tape.meta
    return _ints(tape.ints, m[12]), _ints(tape.ints, m[13]), _ints(tape.ints, m[14])
