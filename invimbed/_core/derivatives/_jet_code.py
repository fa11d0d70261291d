"""The jet closure's right-hand side of one problem, generated as numba code.

Where a problem's derivatives are exact sympy expressions (`SympyProvider`: built with
``from_sympy``, or traced), the right-hand side of the jets that ``backend="numba"``
carries (`invimbed._core.closures.JetClosure`, docs/theory.md, "The jet closure": ``Z``
of the paper's Thm 1, eq. (6), ``V`` with ``Lam = grad V``, eq. (9), and ``W = grad_w
V``, eq. (32), truncated at degree ``K``, ``K + 1``) is written out for that problem:

* the Taylor coefficients of ``f``, ``R`` and of their ``theta``-gradients at the input
  ``x`` (``D^alpha g / alpha!``, ``|alpha| <= K + 1``), only those not identically
  zero, with their common subexpressions computed once (``sympy.cse``);
* the transport ``grad_x U . Phi`` of ``Z`` (degree ``K``), ``V`` and ``W`` (degree
  ``K + 1``) as the sparse operator of those coefficients (one scalar per pair of
  coefficients it links, shared by the rows it acts on), the parameter source
  ``grad V . G`` and the losses' coefficients, each product of a coefficient that is
  not identically zero written once.

The generic kernel (`invimbed._backends._numba_kernels.jet_rhs`) computes the same sums
from index tables, on derivative tensors evaluated whole and gathered; the generated
one does only the products that can be nonzero. The source is one function,

    ``jet_rhs(t, x (N,), th (M,), J (M, nw), y, dy, offs, n)``

writing ``dy`` of the first ``n`` carried orders (the blocks of ``y`` from ``offs[o]``,
the layout of `invimbed._backends._bundles.Jet`), compiled by numba and cached on disk
with the provider's other generated code (`invimbed._core.derivatives._codegen`).

numba's compile time grows with the operations written (it types and lowers each one
anew, a few milliseconds apiece), so the function writes each operator once: one loop
body per degree ``d`` over every row the operator of degree ``d`` transports (the ``N``
rows of ``Z`` of the jet of order ``d``, ``V`` and the ``nw`` rows of ``W`` of the jet
of order ``d - 1``), each row read and written through a view (constant indices, no
counter redefined at every entry), then the rest of a ``V`` or ``W`` row's sum
subtracted in a branch. The sums are those of the code written out row by row, to the
bit (``-(T + a) == -T - a``); about half the compile time of that form.
"""

from __future__ import annotations

from typing import Any

from . import _codegen
from .multiindex import derivative_table, factorials, multi_indices, n_coefficients, product_table

#: Above this many products a problem keeps the generic kernel: numba's compile time
#: grows with the generated function (3.0 to 4.0 s of CPU for the 842 of the coupled
#: pendulums, orders 1 and 2, on the shared 2-core container: docs/performance.md), so
#: this bounds it at well under a minute, once per problem and machine.
MAX_TERMS = 4000


def jet_source(provider: Any, orders: tuple[int, ...]) -> tuple[list[str], int]:
    """The source lines of ``jet_rhs`` (see the module docstring) for the jets of
    ``orders`` (each ``K`` carries ``Z`` of degree ``K``, ``V`` and ``W`` of ``K + 1``),
    and how many products it writes."""
    N, M = provider.n_state, provider.n_theta
    degree = max(orders) + 1
    alphas = [tuple(int(v) for v in a) for a in multi_indices(N, degree)]
    facts = [int(round(f)) for f in factorials(N, degree)]
    none = (0,) * M
    names: list[str] = []
    exprs: list[Any] = []

    def coefficient(name: str, which: str, i: int, c: int, beta: tuple) -> str | None:
        e = provider._diff(which, i, alphas[c], beta)
        if e == 0:
            return None
        e = e if facts[c] == 1 else e / facts[c]
        if e.is_Number:             # a constant: written into the products
            return repr(float(e))
        names.append(name)
        exprs.append(e)
        return name

    unit = [tuple(int(k == m) for k in range(M)) for m in range(M)]
    C = len(alphas)
    phi = {(i, c): v for i in range(N) for c in range(C)
           if (v := coefficient(f"p{i}_{c}", "f", i, c, none)) is not None}
    rc = {c: v for c in range(C) if (v := coefficient(f"r{c}", "R", 0, c, none)) is not None}
    g = {(i, m, c): v for i in range(N) for m in range(M) for c in range(C)
         if (v := coefficient(f"g{i}_{m}_{c}", "f", i, c, unit[m])) is not None}
    rw = {(m, c): v for m in range(M) for c in range(C)
          if (v := coefficient(f"s{m}_{c}", "R", 0, c, unit[m])) is not None}
    lines = ["@_jit", "def jet_rhs(t, x, th, J, y, dy, offs, n):"]
    lines += _assignments(provider, names, exprs)
    lines.append("    nv = J.shape[1] + 1")      # V's row and the parameter rows
    terms, known = 0, {}
    for d in sorted(set(orders) | {K + 1 for K in orders}):
        # the rows transported by the operator of degree d: Z of the blocks of jet order
        # d, V and W of those of order d - 1 (blocks o = 0, 1, ... of ``orders``)
        groups = sorted([(o, "vw") for o, K in enumerate(orders) if K + 1 == d]
                        + [(o, "z") for o, K in enumerate(orders) if K == d])
        first = groups[0][0]
        pad = "    " if first == 0 else "        "
        if first:
            lines.append(f"    if n > {first}:")
        # (the operator's scalars of a body that always runs serve the later ones)
        body, count = _body(d, groups, orders, N, M, phi, rc, g, rw, pad,
                            known if first == 0 else dict(known))
        lines += body
        terms += count
    return lines, terms


def _assignments(provider: Any, names: list[str], exprs: list[Any]) -> list[str]:
    """The coefficients ``names = exprs`` at ``(t, x, th)``, cse'd (the provider's
    `_cse` and printer, `_codegen.point_source`'s conventions)."""
    if not exprs:
        return []
    repl, reduced = provider._cse(exprs)
    return _codegen.assignment_lines(provider._t_arg, provider._z_args, provider._th_args,
                                     repl, list(zip(names, reduced)), ("t", "x", "th"))


def _sum(terms: list[str]) -> str:
    return " + ".join(terms) if terms else "0.0"


def _operator(N: int, order: int, phi: dict) -> dict[int, dict[int, list]]:
    """``A[io][src]``: the pairs ``(factor, coefficient of f)`` by which coefficient
    ``src`` of a row ``U`` of degree ``order`` adds to coefficient ``io`` of
    ``grad_x U . Phi`` (truncated at ``order``), the coefficients of ``f`` that are not
    identically zero only."""
    src, _, fac = derivative_table(N, order)
    ia, ib, io = product_table(N, order - 1, order, order)
    A: dict[int, dict[int, list]] = {}
    for i in range(N):
        for a, b, out in zip(ia, ib, io):
            p = phi.get((i, int(b)))
            if p is not None and fac[i, a] != 0.0:
                A.setdefault(int(out), {}).setdefault(int(src[i, a]), []).append(
                    (float(fac[i, a]), p))
    return A


def _constant(a: str) -> float | None:
    """The value of a coefficient written as a constant (`jet_source`), else None."""
    try:
        return float(a)
    except ValueError:
        return None


def _times(a: str, b: str) -> str:
    """``a * b`` in the generated code, without multiplying by a constant 1."""
    if _constant(a) == 1.0:
        return b
    if _constant(b) == 1.0:
        return a
    return f"{a} * {b}"


def _factor(f: float, name: str) -> str:
    return _times(repr(f), name)


def _operator_lines(A: dict, label: str, pad: str,
                    known: dict | None = None) -> tuple[list[str], dict]:
    """Scalars of the operator ``A`` (a coefficient of ``f`` itself where an entry is
    one of them, a constant where all its coefficients are), and the entries by
    ``(io, src)``. ``known``: scalars already computed (their expression -> name), which
    are not computed again; those computed here are added to it."""
    lines, entry = [], {}
    known = {} if known is None else known
    for out in sorted(A):
        for s in sorted(A[out]):
            pairs = A[out][s]
            values = [_constant(p) for _, p in pairs]
            if all(v is not None for v in values):
                total = sum(f * v for (f, _), v in zip(pairs, values))
                if total != 0.0:
                    entry[out, s] = repr(total)
                continue
            if len(pairs) == 1 and pairs[0][0] == 1.0:
                entry[out, s] = pairs[0][1]
                continue
            value = _sum([_factor(f, p) for f, p in pairs])
            if value not in known:
                known[value] = f"{label}_{out}_{s}"
                lines.append(f"{pad}{known[value]} = {value}")
            entry[out, s] = known[value]
    return lines, entry


def _transport(entry: dict, size: int, name: Any, pad: str, total: Any) -> tuple[list[str], int]:
    """``d[io] = total(io) = -(sum_src A[io, src] U[src])`` for every coefficient ``io`` of
    a row (``d`` the row's view of ``dy``, ``U[src]`` the local ``name(src)``; the sum
    kept in the local ``total(io)`` for the rest of the row's sum, see `_vw_rest`), and
    the number of products."""
    by_out: dict[int, list] = {}
    for (out, s), op in entry.items():
        by_out.setdefault(out, []).append((s, op))
    lines, count = [], 0
    for out in range(size):
        terms = [_times(op, name(s)) for s, op in sorted(by_out.get(out, []))]
        count += len(terms)
        lines.append(f"{pad}{total(out)} = -({_sum(terms)})")
        lines.append(f"{pad}d[{out}] = {total(out)}")
    return lines, count


def _reads(names: list[str], pad: str) -> list[str]:
    """``names[j] = u[j]`` (``u``: the row's view of ``y``). (The rows are views, so each
    index is a constant: counting an index up (``k += 1``) redefines a variable at every
    entry, whose SSA form numba builds in time quadratic in the length of the block, and
    an index computed (``y[k + j]``) costs an operation more to type and lower.)"""
    return [f"{pad}{n} = u[{j}]" for j, n in enumerate(names)]


def _body(d: int, groups: list[tuple[int, str]], orders: tuple[int, ...], N: int, M: int,
          phi: dict, rc: dict, g: dict, rw: dict, pad: str,
          known: dict) -> tuple[list[str], int]:
    """The lines of the rows of degree ``d`` (``groups``: ``(o, "z")`` the ``N`` rows of
    ``Z`` of carried order ``o``, ``(o, "vw")`` its ``V`` and ``W`` rows), one body in a
    loop over the rows: the same operator transports each row (``grad_x U . Phi``
    truncated at degree ``d``); then the rest of a row's sum: ``R``'s coefficients for
    ``V``, the source ``grad V . G`` and ``R``'s gradient for ``W``. Its number of
    products (as if each row were written out). ``known``: see `_operator_lines`."""
    c = n_coefficients(N, d)
    inner, deep = pad + "    ", pad + "        "

    def un(s):
        return f"u{d}_{s}"

    def tn(s):
        return f"t{d}_{s}"

    lines, entry = _operator_lines(_operator(N, d, phi), f"a{d}", pad, known)
    part, count = _transport(entry, c, un, inner, tn)
    # the rows: group by group, j counting on; each group's first row, number of rows
    # and where they start in y
    starts, rows, extras, terms = "0", [], [], 0
    for gi, (o, kind) in enumerate(groups):
        active = "" if o == groups[0][0] else f" if n > {o} else 0"
        if kind == "z":
            count_g, base = str(N), f"offs[{o}]"
            terms += N * count
        else:                       # V after the N rows of Z (of degree K = d - 1)
            kv = f"kv{o}"
            lines.append(f"{pad}{kv} = offs[{o}] + {N * n_coefficients(N, orders[o])}")
            count_g, base = "nv", kv
            pre, v_rest, w_rest, more = _vw_rest(o, d, N, M, rc, g, rw, kv, pad, deep)
            lines += pre
            terms += 2 * count + more
            extras.append((starts, v_rest, w_rest))
        end = f"e{d}_{gi}"
        lines.append(f"{pad}{end} = " + (f"{starts} + " if starts != "0" else "")
                     + (f"({count_g}{active})" if active else count_g))
        rows.append((starts, end, base))
        starts = end
    lines.append(f"{pad}for j in range({starts}):")
    for i, (start, end, base) in enumerate(rows):
        offset = f"{base} + {c} * (j - {start})" if start != "0" else f"{base} + {c} * j"
        if len(rows) == 1:
            lines.append(f"{inner}k = {offset}")
        else:
            test = "if" if i == 0 else ("elif" if i < len(rows) - 1 else "else")
            cond = f" j < {end}" if test != "else" else ""
            lines += [f"{inner}{test}{cond}:", f"{deep}k = {offset}"]
    lines += [f"{inner}u = y[k:k + {c}]", f"{inner}d = dy[k:k + {c}]"]
    lines += _reads([un(s) for s in range(c)], inner) + part
    for start, v_rest, w_rest in extras:
        lines += [f"{inner}if j == {start}:"] + (v_rest or [f"{deep}pass"])
        end = rows[[r[0] for r in rows].index(start)][1]
        w = "j - 1" if start == "0" else f"j - {start} - 1"
        lines += [f"{inner}elif j < {end}:", f"{deep}w = {w}"] + (
            w_rest or [f"{deep}pass"])
    return lines, terms


def _vw_rest(o: int, d: int, N: int, M: int, rc: dict, g: dict, rw: dict, kv: str,
             pad: str, deep: str) -> tuple[list[str], list[str], list[str], int]:
    """For the ``V`` and ``W`` rows of carried order ``o`` (degree ``d``): the lines read
    before the loop (the entries of ``V`` that ``Lam = grad V`` takes), the rest of
    ``V``'s sum, the rest of a ``W`` row's (after ``G = f_theta . J[:, w]`` and
    ``R_theta . J[:, w]``), and their number of products."""
    c, K = n_coefficients(N, d), d - 1
    vsrc, _, vfac = derivative_table(N, d)
    sa, sb, so = product_table(N, d, K, d)
    params: list[str] = []
    G = {}
    for i in range(N):
        for a in range(c):
            parts = [_times(g[i, m, a], f"J{m}") for m in range(M) if (i, m, a) in g]
            if parts:
                G[i, a] = f"G{o}_{i}_{a}"
                params.append(f"{deep}{G[i, a]} = {_sum(parts)}")
    Rw = {}
    for a in range(c):
        parts = [_times(rw[m, a], f"J{m}") for m in range(M) if (m, a) in rw]
        if parts:
            Rw[a] = f"S{o}_{a}"
            params.append(f"{deep}{Rw[a]} = {_sum(parts)}")
    # J[:, w], each entry read once per row
    params = [f"{deep}J{m} = J[{m}, w]" for m in range(M)
              if any(f"J{m}" in line.split(" = ", 1)[1] for line in params)] + params
    pre = [f"{pad}v{o} = y[{kv}:{kv} + {c}]"]
    source: dict[int, list[str]] = {}
    lam: dict[tuple[int, int], str] = {}
    read: set[str] = set()
    for i in range(N):
        for a, lb, out in zip(sa, sb, so):
            Gi = G.get((i, int(a)))
            if Gi is None:
                continue
            key = (i, int(lb))
            if key not in lam:      # Lam_i = dV / dz_i, of degree K
                s = int(vsrc[i, lb])
                vname = f"v{o}_{s}"
                if vname not in read:
                    read.add(vname)
                    pre.append(f"{pad}{vname} = v{o}[{s}]")
                value = _factor(float(vfac[i, lb]), vname)
                lam[key] = value if value.isidentifier() else f"lam{o}_{i}_{int(lb)}"
                if lam[key] != value:
                    pre.append(f"{pad}{lam[key]} = {value}")
            source.setdefault(int(out), []).append(_times(Gi, lam[key]))

    def rest(out: int, extra: list[str]) -> list[str]:
        """The rest of the sum of entry ``out`` subtracted from its transport ``t``
        (the same floating-point number: ``-(T + a + b) == (-T - a) - b``)."""
        if not extra:
            return []
        return [f"{deep}d[{out}] = t{d}_{out} - {' - '.join(extra)}"]

    v_rest = [x for out in range(c) for x in rest(out, [rc[out]] if out in rc else [])]
    w_rest = params + [x for out in range(c) for x in rest(
        out, source.get(out, []) + ([Rw[out]] if out in Rw else []))]
    more = sum(a < c for a in rc) + sum(len(v) for v in source.values()) + len(Rw)
    return pre, v_rest, w_rest, more


def jet_function(provider: Any, orders: tuple[int, ...]) -> Any:
    """The numba dispatcher of the generated ``jet_rhs`` for ``orders`` (not compiled
    yet: the caller compiles it for its signature, announced), cached on the provider;
    None where the function would exceed `MAX_TERMS` products."""
    cache = provider.__dict__.setdefault("_jet_code", {})
    key = tuple(int(k) for k in orders)
    if key not in cache:
        lines, terms = jet_source(provider, key)
        cache[key] = None if terms > MAX_TERMS else _codegen.load(lines).jet_rhs
        provider.codegen_calls += 1
    return cache[key]
