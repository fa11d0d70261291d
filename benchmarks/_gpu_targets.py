"""The GPU's targets (``gpu_check.py --targets``): the CUDA kernels against the numba CPU
backends, diffrax's jitted ``vmap`` and the cupy sweep, at 64 depths and ``B`` inputs.

Problems, both built with ``invimbed.from_sympy`` (the CUDA kernels run generated code):

* ``pendulum``: the forced pendulum of ``gpu_check.py`` (``N = 2``, ``M = 2``);
* ``chain6``: three pendulums in a chain coupled by springs (``N = 6``, ``M = 2``: a torque
  on the first link and the spring constant).

``n = 64`` depths evenly spaced in ``[-1, 0]``, inputs ``normal(0, 0.5)``, the constant
control ``CONTROL``. Rows timed (seconds per call, results on the host; the first call,
which compiles, timed apart on ``B = FIRST_B``):

* ``cuda ensemble``: ``solve_adjoint(backend="cuda")`` (RK45, ``rtol=1e-6, atol=1e-9``,
  exact, every row its own adaptive steps), ``memory_budget`` ``--device-budget``;
* ``numba ensemble``: the same call with ``backend="numba"`` on the CPU's cores;
* ``numba sweep``: ``solve_imbedding(backend="numba")``, the jet of order 1 without its
  estimate, ``rk4`` with one step between depths (the sweep of docs/performance.md's GPU
  table);
* ``diffrax``: ``jax.jit(jax.vmap(...))`` of ``diffeqsolve`` (Dopri5, the same
  ``PIDController(rtol, atol)``) of ``[z, int R]`` from ``p`` to ``q`` and
  ``jax.value_and_grad`` in ``x`` and ``theta``, rows in batches of ``DIFFRAX_ROWS``, on
  the GPU where jax sees one (skipped with the reason where jax or diffrax is missing);
* ``cuda sweep``: not built (docs/performance.md, "Which GPU path"): printed as such.

Accuracy of the ensemble and of diffrax: the largest relative error of ``value`` and of
``adjoint`` (floor 1e-8 of the field's largest entry) on the first ``ACC_B`` inputs,
against ``solve_adjoint(backend="numba", rtol=1e-11, atol=1e-13)``.

A size is skipped where the last size's time, scaled linearly in ``B``, predicts more
than ``--cap`` seconds; the ratio to the CPU at ``B = 10^6`` is then the extrapolation
of its largest measured size (marked ``~``).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

import invimbed

DEPTHS = np.linspace(0.0, -1.0, 64)
CONTROL = invimbed.Constant([0.2, 0.1])
RTOL, ATOL = 1e-6, 1e-9
FIRST_B = 16
ACC_B = 64
DIFFRAX_ROWS = 1 << 20
#: The issue's targets: (name, what is compared, limit).
TARGETS = ("cuda sweep: 64 depths x 10^6 inputs of the pendulum <= 1 s",
           "cuda ensemble: the same 6.4e7 rows, exact, <= 5 s",
           "cuda ensemble >= 30x the numba CPU ensemble at B = 10^6",
           "cuda ensemble within 2x of diffrax's GPU time at equal accuracy",
           "a cuda call at B = 10^3 <= 50 ms")


def problems() -> dict[str, tuple[Any, Callable]]:
    """``{name: (from_sympy problem, jax functions maker)}``."""
    import sympy as sp

    t = sp.Symbol("t")
    q, v = sp.symbols("q v")
    u, c = sp.symbols("u c")
    f = [v, -sp.sin(q) - c * v + u + 0.3 * sp.cos(1.3 * t)]
    R = 0.4 * (1 - sp.cos(q)) + 0.1 * v ** 2 + 0.05 * (u ** 2 + c ** 2)
    T = (1 - sp.cos(q - 0.5)) + 0.25 * (v + 0.2) ** 4
    pend = invimbed.from_sympy(t, [q, v], [u, c], f, R, T)
    qs, vs = sp.symbols("q1:4"), sp.symbols("v1:4")
    k = c
    qq = (0,) + tuple(qs) + (qs[-1],)
    acc = [-sp.sin(qs[i]) + k * (qq[i] - 2 * qs[i] + qq[i + 2]) - 0.1 * vs[i]
           + (u if i == 0 else 0) for i in range(3)]
    f6 = list(vs) + acc
    R6 = 0.1 * sum(x ** 2 for x in qs) + 0.05 * u ** 2
    T6 = sum(1 - sp.cos(x - 0.3) for x in qs) + 0.05 * sum(x ** 2 for x in vs)
    chain = invimbed.from_sympy(t, list(qs) + list(vs), [u, c], f6, R6, T6)
    return {"pendulum": (pend, _jax_pendulum), "chain6": (chain, _jax_chain)}


def _jax_pendulum(jnp: Any) -> tuple[Callable, Callable, Callable]:
    def f(t, z, th):
        return jnp.stack([z[1], -jnp.sin(z[0]) - th[1] * z[1] + th[0] + 0.3 * jnp.cos(1.3 * t)])

    def R(t, z, th):
        return 0.4 * (1 - jnp.cos(z[0])) + 0.1 * z[1] ** 2 + 0.05 * (th[0] ** 2 + th[1] ** 2)

    def T(z):
        return (1 - jnp.cos(z[0] - 0.5)) + 0.25 * (z[1] + 0.2) ** 4
    return f, R, T


def _jax_chain(jnp: Any) -> tuple[Callable, Callable, Callable]:
    def f(t, z, th):
        q, v = z[:3], z[3:]
        left = jnp.concatenate([jnp.zeros(1), q[:2]])
        right = jnp.concatenate([q[1:], q[2:]])
        acc = -jnp.sin(q) + th[1] * (left - 2 * q + right) - 0.1 * v
        return jnp.concatenate([v, acc.at[0].add(th[0])])

    def R(t, z, th):
        return 0.1 * jnp.sum(z[:3] ** 2) + 0.05 * th[0] ** 2

    def T(z):
        return jnp.sum(1 - jnp.cos(z[:3] - 0.3)) + 0.05 * jnp.sum(z[3:] ** 2)
    return f, R, T


def inputs(B: int, N: int) -> np.ndarray:
    return np.random.default_rng(B).normal(scale=0.5, size=(B, N))


def max_rel(res: dict, ref: Any) -> float:
    out = 0.0
    for k in ("value", "adjoint"):
        a, b = np.asarray(res[k], float), np.asarray(ref[k], float)
        floor = 1e-8 * np.max(np.abs(b))
        out = max(out, float(np.max(np.abs(a - b) / np.maximum(np.abs(b), floor))))
    return out


def diffrax_runner(make: Callable, N: int) -> tuple[Callable | None, str]:
    """``run(x) -> {"value", "adjoint"}`` (rows in the result's (depth, input) order) by
    diffrax, or None and why not."""
    try:
        import diffrax
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        return None, f"jax/diffrax not importable ({exc})"
    jax.config.update("jax_enable_x64", True)
    f, R, T = make(jnp)
    theta = jnp.asarray(CONTROL.w)

    def row(p, x, th):
        def rhs(t, y, args):
            z = y[:N]
            return jnp.concatenate([f(t, z, th), R(t, z, th)[None]])
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(rhs), diffrax.Dopri5(), p, 0.0, None,
            jnp.concatenate([x, jnp.zeros(1)]),
            stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL),
            max_steps=10_000)
        y = sol.ys[-1]
        return y[N] + T(y[:N])

    grad = jax.value_and_grad(row, argnums=(1, 2))
    batched = jax.jit(jax.vmap(lambda p, x: grad(p, x, theta)))

    def run(x: np.ndarray) -> dict:
        B = x.shape[0]
        rows = DEPTHS.size * B
        # batches of a few shapes (each shape compiles anew): a power of two from 2^16
        # to DIFFRAX_ROWS, padded with copies of the last row
        size = min(DIFFRAX_ROWS, max(1 << 16, 1 << (rows - 1).bit_length()))
        pad = -rows % size
        p = np.concatenate([np.repeat(DEPTHS, B), np.full(pad, DEPTHS[-1])])
        xs = np.concatenate([np.tile(x, (DEPTHS.size, 1)), np.repeat(x[-1:], pad, axis=0)])
        vals, adj = [], []
        for lo in range(0, p.size, size):
            val, (gx, _) = batched(jnp.asarray(p[lo:lo + size]), jnp.asarray(xs[lo:lo + size]))
            vals.append(np.asarray(val))
            adj.append(np.asarray(gx))
        return {"value": np.concatenate(vals)[:rows].reshape(DEPTHS.size, B),
                "adjoint": np.concatenate(adj)[:rows].reshape(DEPTHS.size, B, N)}
    return run, f"jax {jax.__version__} on {jax.devices()[0].platform}, diffrax {diffrax.__version__}"


def runners(prob: Any, make: Callable, N: int, budget: str) -> dict[str, tuple[Callable | None, str]]:
    kw = dict(control=CONTROL, rtol=RTOL, atol=ATOL)
    sweep = dict(control=CONTROL, closure="jet", order=1, estimate_error=False, method="rk4",
                 step=1.0 / 63)
    return {
        "cuda ensemble": (lambda x: invimbed.solve_adjoint(
            prob, x, DEPTHS, backend="cuda", memory_budget=budget, **kw), ""),
        "numba ensemble": (lambda x: invimbed.solve_adjoint(
            prob, x, DEPTHS, backend="numba", memory_budget=budget, **kw), ""),
        "numba sweep": (lambda x: invimbed.solve_imbedding(
            prob, x, DEPTHS, backend="numba", memory_budget=budget, **sweep), ""),
        "diffrax": diffrax_runner(make, N),
        "cuda sweep": (None, "not built: solve_imbedding has no backend='cuda' yet"),
    }


def timed_series(fn: Callable, make: Callable[[int], Any], sizes: list[int], cap: float,
                 repeats: int, first_b: int) -> dict:
    """``fn(make(B))`` timed for each ``B`` of ``sizes`` (best of ``repeats`` while a call
    takes under a second), after an untimed first call on ``make(first_b)``; a size whose
    time, predicted from the last one linearly in ``B``, exceeds ``cap`` seconds is
    skipped; an exception ends the series and is reported. ``gpu_check.py``'s series
    and `measure`'s rows are both timed by it."""
    out: dict = {"times": {}, "skipped": {}}
    try:
        t0 = time.perf_counter()
        res = fn(make(first_b))
        out["first_call_s"] = time.perf_counter() - t0
        if hasattr(res, "status"):
            out["status"] = int(res.status)
    except Exception as exc:  # reported, the other series still run
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return out
    last = None
    for B in sizes:
        if last is not None and last[1] * B / last[0] > cap:
            out["skipped"][B] = last[1] * B / last[0]
            continue
        x = make(B)
        best = float("inf")
        try:
            for _ in range(repeats if (last is None or last[1] < 1.0) else 1):
                t0 = time.perf_counter()
                fn(x)
                best = min(best, time.perf_counter() - t0)
        except Exception as exc:
            out["error"] = f"B = {B}: {type(exc).__name__}: {str(exc)[:300]}"
            break
        out["times"][B] = best
        last = (B, best)
    return out


def at(row: dict, B: int) -> tuple[float | None, str]:
    """The time of ``row`` at ``B``: measured, or extrapolated linearly from its largest
    measured size (marked ``~``)."""
    if B in row.get("times", {}):
        return row["times"][B], ""
    if row.get("times"):
        b, t = max(row["times"].items())
        return t * B / b, "~"
    return None, ""


def accuracy(prob: Any, name: str, run_diffrax: Callable | None, N: int) -> dict:
    x = inputs(ACC_B, N)
    ref = invimbed.solve_adjoint(prob, x, DEPTHS, control=CONTROL, backend="numba",
                                 rtol=1e-11, atol=1e-13)
    out = {}
    try:
        out["cuda ensemble"] = max_rel(invimbed.solve_adjoint(
            prob, x, DEPTHS, control=CONTROL, backend="cuda", rtol=RTOL, atol=ATOL), ref)
    except Exception as exc:
        out["cuda ensemble"] = f"{type(exc).__name__}: {exc}"
    if run_diffrax is not None:
        try:
            out["diffrax"] = max_rel(run_diffrax(x), ref)
        except Exception as exc:
            out["diffrax"] = f"{type(exc).__name__}: {exc}"
    return out


def measure(sizes: list[int], cap: float, repeats: int, budget: str,
            only: list[str] | None = None, log: Callable = print) -> dict:
    """Every problem's rows (module docstring) and the targets' ratios."""
    doc: dict = {"sizes": sizes, "n_depths": DEPTHS.size, "rtol": RTOL, "atol": ATOL,
                 "problems": {}}
    for name, (prob, make) in problems().items():
        N = int(prob.derivative_provider.n_state)
        rows = {}
        for label, (fn, note) in runners(prob, make, N, budget).items():
            if only and label not in only:
                continue
            if fn is None:
                rows[label] = {"error": note}
                log(f"{name:9s} {label:15s} {note}")
                continue
            rows[label] = r = timed_series(fn, lambda B: inputs(B, N), sizes, cap,
                                           repeats, FIRST_B)
            r["note"] = note
            cells = ", ".join(f"B={B}: {t:.4f} s" for B, t in r["times"].items())
            log(f"{name:9s} {label:15s} first {r.get('first_call_s', float('nan')):.2f} s; "
                f"{cells}{'; ' + r['error'] if 'error' in r else ''}"
                f"{'; skipped ' + str(list(r['skipped'])) if r['skipped'] else ''}")
        doc["problems"][name] = {"rows": rows}
        if not only or "cuda ensemble" in only:
            run_dx = runners(prob, make, N, budget)["diffrax"][0] if (
                not only or "diffrax" in only) else None
            doc["problems"][name]["accuracy"] = acc = accuracy(prob, name, run_dx, N)
            log(f"{name:9s} accuracy (max relative error of value and adjoint, {ACC_B} "
                f"inputs, vs numba at rtol 1e-11): {acc}")
    doc["targets"] = targets(doc, sizes)
    for line in doc["targets"]:
        log(line)
    return doc


def targets(doc: dict, sizes: list[int]) -> list[str]:
    """The issue's targets, each with what was measured (or why not)."""
    pend = doc["problems"].get("pendulum", {}).get("rows", {})
    big, small = max(sizes), min(sizes)
    ens, ens_mark = at(pend.get("cuda ensemble", {}), big)
    cpu, cpu_mark = at(pend.get("numba ensemble", {}), big)
    dx, dx_mark = at(pend.get("diffrax", {}), big)
    first, _ = at(pend.get("cuda ensemble", {}), small)

    def s(t: float | None, mark: str = "") -> str:
        return "not measured" if t is None else f"{mark}{t:.3f} s"
    lines = [f"targets (pendulum, 64 depths, B = {big} unless said; ~ = extrapolated "
             f"linearly from the largest B measured):",
             f"  {TARGETS[0]}: no cuda sweep was built",
             f"  {TARGETS[1]}: {s(ens, ens_mark)}"
             + (f" (B = {big}: {DEPTHS.size * big:.1e} rows)" if big != 10 ** 6 else ""),
             f"  {TARGETS[2]}: numba {s(cpu, cpu_mark)}, ratio "
             + (f"{cpu_mark or ens_mark}{cpu / ens:.1f}x" if cpu and ens else "n/a"),
             f"  {TARGETS[3]}: diffrax {s(dx, dx_mark)}, ratio cuda/diffrax "
             + (f"{dx_mark or ens_mark}{ens / dx:.2f}" if dx and ens else "n/a")
             + " (accuracy: see the accuracy lines)",
             f"  {TARGETS[4]}: cuda ensemble at B = {small}: {s(first)}"]
    return lines
