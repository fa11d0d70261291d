"""Derivative plans: the finite-difference rule of `invimbed.FiniteDifferences`, as
index tables that a compiled kernel can follow without calling back into Python.

A *request* is "the Taylor coefficients, in ``z`` up to degree ``order``, of ``which``
(``"f"``, ``"R"``, ``"T"``) or of its ``theta``-gradient (``dth = 1``)", the layout of
`DerivativeProvider.taylor`: ``(*out, *[M] * dth, C(N + order, order))``. Each degree
``k`` is one *piece*: the derivative tensor ``(which, dz=k, dth)``, obtained exactly as
the numpy provider obtains it --- from the highest user derivative not above it (the
provider's own ``base_key``), with nested central differences for the levels still
missing, theta levels innermost, the step of `finite_difference.relative_step` and
`finite_difference.step_size` recomputed at every nested point --- so that a kernel following the plan reproduces the
numpy backend's numbers bit for bit, up to the order of summation in the sweep.

Only the tensor entries that the Taylor coefficients use are computed (sorted index
tuples), grouped by *direction*: the tuple of differenced coordinates, for which the
``2^levels`` evaluations of the base function give every entry at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations_with_replacement

import numpy as np

from .._core.derivatives import DerivativeOrderError, derivative_name
from .._core.derivatives.finite_difference import relative_step
from .._core.derivatives.multiindex import factorials, n_coefficients

#: The functions a kernel can call, in the order of its function tuple. ``(which, dz,
#: dth)``; ``(which, 0, 0)`` is the function itself.
BASE_KEYS = (
    ("f", 0, 0), ("f", 1, 0), ("f", 2, 0), ("f", 3, 0), ("f", 0, 1), ("f", 1, 1), ("f", 2, 1),
    ("R", 0, 0), ("R", 1, 0), ("R", 2, 0), ("R", 3, 0), ("R", 0, 1), ("R", 1, 1), ("R", 2, 1),
    ("T", 0, 0), ("T", 1, 0), ("T", 2, 0), ("T", 3, 0),
    ("f", 3, 1), ("R", 3, 1),
)


def key_name(key: tuple[str, int, int]) -> str:
    which, dz, dth = key
    if dz + dth == 0:
        return {"f": "dynamics", "R": "running_loss", "T": "terminal_loss"}[which]
    return derivative_name(which, dz, dth)


@dataclass
class Request:
    which: str
    dth: int
    order: int


@dataclass
class Plan:
    """Flat tables for a list of requests (see the module docstring)."""

    req_start: np.ndarray    # (n_req + 1,) pieces of request r: req_start[r]:req_start[r+1]
    req_size: np.ndarray     # (n_req,) size of the coefficient buffer of request r
    base: np.ndarray         # (n_piece,) index into BASE_KEYS, -1 for a zero function
    levels: np.ndarray       # (n_piece,) nested difference levels
    h_rel: np.ndarray        # (n_piece,)
    base_size: np.ndarray    # (n_piece,) entries of the base function's output
    dir_start: np.ndarray    # (n_piece + 1,)
    dir_var: np.ndarray      # (n_dir, max_levels) 0: z, 1: theta; outermost level first
    dir_idx: np.ndarray      # (n_dir, max_levels) coordinate differenced at each level
    gather_start: np.ndarray  # (n_dir + 1,)
    dest: np.ndarray         # (n_gather,) index in the request's buffer
    entry: np.ndarray        # (n_gather,) index in the base output
    fact: np.ndarray         # (n_gather,) alpha! (the coefficient is entry / alpha!)
    used: frozenset          # BASE_KEYS used

    def arrays(self) -> tuple:
        return (self.req_start, self.base, self.levels, self.h_rel, self.base_size,
                self.dir_start, self.dir_var, self.dir_idx, self.gather_start, self.dest,
                self.entry, self.fact)


def base_key(provider, which: str, dz: int, dth: int) -> tuple[str, int, int]:
    """The function a derivative is computed from: the derivative itself for a provider
    that has every derivative exactly (`SympyProvider`), otherwise the highest one the
    user gave below it (the `FiniteDifferences` rule), differenced the rest of the way."""
    if getattr(provider, "exact_derivatives", False):
        return (which, dz, dth)
    return provider.base_key(which, dz, dth)


def build_plan(provider, requests: list[Request]) -> Plan:
    """Plan ``requests`` for a `FiniteDifferences` provider (see the module docstring)."""
    N, M = provider.n_state, provider.n_theta
    zero = set(getattr(provider, "zero", ()))
    max_levels_allowed = getattr(provider, "max_fd_levels", 4)
    scale = getattr(provider, "scale", 1.0)
    req_start, req_size = [0], []
    base, levels, h_rel, base_size, dir_start = [], [], [], [], [0]
    dir_var, dir_idx, gather_start = [], [], [0]
    dest, entry, fact = [], [], []
    used = set()
    for req in requests:
        out = (N,) if req.which == "f" else ()
        n_out = N if req.which == "f" else 1
        mth = M if req.dth else 1
        ctot = n_coefficients(N, req.order)
        req_size.append(n_out * mth * ctot)
        facts = factorials(N, req.order)
        for k in range(req.order + 1):
            if req.which in zero:  # a missing loss: zero, with every derivative
                base.append(-1); levels.append(0); h_rel.append(0.0); base_size.append(1)
                dir_start.append(dir_start[-1])
                continue
            key = base_key(provider, req.which, k, req.dth)
            if key not in BASE_KEYS:
                raise DerivativeOrderError(
                    f"the accelerated backends call user derivatives up to dz <= 3 and "
                    f"dth <= 1, but this solve would start from {key_name(key)!r}; use "
                    f"backend='numpy'")
            used.add(key)
            lz, lt = k - key[1], req.dth - key[2]
            lev = lz + lt
            if lev > max_levels_allowed:
                raise DerivativeOrderError(
                    f"{req.which} derivative (dz={k}, dth={req.dth}) would need {lev} nested "
                    f"levels of finite differences (at most {max_levels_allowed} allowed); "
                    f"give exact derivatives")
            base.append(BASE_KEYS.index(key))
            levels.append(lev)
            h_rel.append(relative_step(lev, scale))
            bshape = out + (N,) * key[1] + (M,) * key[2]
            base_size.append(int(np.prod(bshape, dtype=int)))
            col0 = n_coefficients(N, k - 1) if k else 0
            # entries grouped by direction (za, ta)
            groups: dict[tuple, list] = {}
            for m in range(mth):
                for ci, combo in enumerate(combinations_with_replacement(range(N), k)):
                    zb, za = combo[:key[1]], combo[key[1]:]
                    tb, ta = ((m,), ()) if key[2] else ((), (m,) if req.dth else ())
                    for o in range(n_out):
                        idx = (o,) if out else ()
                        flat = 0
                        for d, size in zip(idx + zb + tb, bshape):
                            flat = flat * size + d
                        col = col0 + ci
                        groups.setdefault((za, ta), []).append(
                            ((o * mth + m) * ctot + col, flat, facts[col]))
            for (za, ta), items in groups.items():
                lvl = [(0, a) for a in reversed(za)] + [(1, a) for a in reversed(ta)]
                dir_var.append([v for v, _ in lvl])
                dir_idx.append([a for _, a in lvl])
                for d_, e_, f_ in items:
                    dest.append(d_); entry.append(e_); fact.append(f_)
                gather_start.append(len(dest))
            dir_start.append(len(dir_var))
        req_start.append(len(base))
    width = max([len(v) for v in dir_var] + [1])
    var = np.zeros((len(dir_var), width), dtype=np.int64)
    idx = np.zeros((len(dir_var), width), dtype=np.int64)
    for i, (v, a) in enumerate(zip(dir_var, dir_idx)):
        var[i, :len(v)] = v
        idx[i, :len(a)] = a
    i64 = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return Plan(i64(req_start), i64(req_size), i64(base), i64(levels),
                np.asarray(h_rel, dtype=float), i64(base_size), i64(dir_start), var, idx,
                i64(gather_start), i64(dest), i64(entry), np.asarray(fact, dtype=float),
                frozenset(used))
