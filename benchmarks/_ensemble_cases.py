"""The rows the ensemble benchmarks share (``bench_ensemble.py``, ``bench_user_styles.py``,
``bench_traced.py``; no benchmark imports another): the invimbed calls on the coupled
pendulums of ``_pendulums.py``, the same problem written for CasADi (CVODES) and diffrax
(jax), a timed `Case`, and the probe of which ensemble backends run here (a child
process: a compiled backend can abort the process that tries it).

Importing it first pins BLAS, OpenMP, numba and XLA to one thread each (where the
environment does not say otherwise), before numpy or jax load: every tool is timed on
one core. ``python benchmarks/_ensemble_cases.py --probe numba`` is the probe's child.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")

import atexit  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import invimbed  # noqa: E402
import _pendulums as P  # noqa: E402
from _machine import interleaved  # noqa: E402

TIGHT = (1e-12, 1e-14)          # CasADi / diffrax verification tolerance
BENCH = (1e-8, 1e-10)           # targets (a), (b'), (d)
LOOSE = (1e-6, 1e-9)            # targets (b), (c)


def have(name: str) -> bool:
    """Whether ``name`` imports."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


# -- invimbed rows --------------------------------------------------------------------------
def adjoint_support() -> dict[str, bool]:
    keys = P.adjoint_keywords()
    return {"strategy": "strategy" in keys, "backend": "backend" in keys}


def per_depth_call(n: int, tol: tuple[float, float]) -> Callable[[], Any]:
    extra = {"strategy": "per_depth"} if adjoint_support()["strategy"] else {}
    d = P.depths(n)
    return lambda: invimbed.solve_adjoint(P.problem(), P.X0, d, control=P.CONTROL,
                                          rtol=tol[0], atol=tol[1], **extra)


def ensemble_call(n: int, tol: tuple[float, float], backend: str, x: Any = P.X0,
                  problem: Any = None) -> Callable[[], Any]:
    d = P.depths(n)
    if problem is None:
        problem = ENSEMBLE_PROBLEM.get(backend)
    pb = P.problem() if problem is None else problem
    extra = {"backend": backend} if backend != "numpy" else {}
    return lambda: invimbed.solve_adjoint(pb, x, d, control=P.CONTROL, rtol=tol[0],
                                          atol=tol[1], strategy="ensemble", **extra)


def imbedding_call(n: int, tol: tuple[float, float]) -> Callable[[], Any]:
    d = P.depths(n)
    return lambda: invimbed.solve_imbedding(P.problem(), P.X0, d, control=P.CONTROL,
                                            closure="jet", order=1, estimate_error=False,
                                            rtol=tol[0], atol=tol[1])


# -- CasADi ------------------------------------------------------------------------------------
def casadi_function(tol: tuple[float, float], lmm: str) -> Any:
    """``G(x, w, p) -> (z(q), J, [dJ/dx; dJ/dw])`` for one depth, CVODES with ``lmm``
    ("bdf": Newton iteration; "adams": functional iteration)."""
    import casadi as ca

    z = ca.SX.sym("z", P.N)
    u = ca.SX.sym("u", P.M)
    h = ca.SX.sym("h")
    fz = ca.vertcat(z[2], z[3],
                    -ca.sin(z[0]) - P.K_SPRING * (z[0] - z[1]) - P.C_DAMP * z[2] + u[0],
                    -ca.sin(z[1]) - P.K_SPRING * (z[1] - z[0]) - P.C_DAMP * z[3] + u[1])
    Rz = P.A_RUN * (2 - ca.cos(z[0]) - ca.cos(z[1])) + P.RHO / 2 * ca.sumsqr(u)
    # one torque piece in normalised time s in [0, 1]: dz/ds = h f, dL/ds = h R
    dae = {"x": z, "p": ca.vertcat(u, h), "ode": h * fz, "quad": h * Rz}
    opts = {"reltol": tol[0], "abstol": tol[1], "linear_multistep_method": lmm,
            "quad_err_con": True, "max_num_steps": 100_000}
    if lmm == "adams":
        opts["nonlinear_solver_iteration"] = "functional"
    F = ca.integrator("F", "cvodes", dae, 0.0, 1.0, opts)
    x = ca.MX.sym("x", P.N)
    w = ca.MX.sym("w", P.N_W)
    p = ca.MX.sym("p")
    zc, L = x, 0
    for k in range(len(P.KNOTS) - 1):
        hk = ca.fmax(0, P.KNOTS[k + 1] - ca.fmax(p, P.KNOTS[k]))
        r = F(x0=zc, p=ca.vertcat(w[P.M * k:P.M * (k + 1)], hk))
        zc, L = r["xf"], L + r["qf"]
    J = L + 0.5 * ca.sumsqr(zc - ca.DM(P.Z_TARGET))
    grad = ca.gradient(J, ca.vertcat(x, w))      # reverse mode: CVODES adjoint
    return ca.Function("G", [x, w, p], [zc, J, grad])


def casadi_loop(n: int, tol: tuple[float, float]) -> Callable[[], Any]:
    G = casadi_function(tol, "bdf")
    ps = P.depths(n)

    def call() -> dict[str, np.ndarray]:
        out = [G(P.X0, P.W, float(p)) for p in ps]
        z = np.array([np.asarray(o[0]).ravel() for o in out])
        J = np.array([float(o[1]) for o in out])
        g = np.array([np.asarray(o[2]).ravel() for o in out])
        return P.fields_from(ps, P.X0, z, J, g[:, :P.N], g[:, P.N:])
    return call


def casadi_map(n: int, tol: tuple[float, float], threads: int = 2) -> Callable[[], Any]:
    Gm = casadi_function(tol, "adams").map(n, "thread", threads)
    ps = P.depths(n)
    X = np.tile(P.X0[:, None], (1, n))
    Wn = np.tile(P.W[:, None], (1, n))

    def call() -> dict[str, np.ndarray]:
        z, J, g = Gm(X, Wn, ps[None, :])
        z, g = np.asarray(z).T, np.asarray(g).T
        return P.fields_from(ps, P.X0, z, np.asarray(J).ravel(), g[:, :P.N], g[:, P.N:])
    return call


# -- diffrax ---------------------------------------------------------------------------------
_JAX_READY = False


def _jax() -> tuple[Any, Any, Any]:
    global _JAX_READY
    import diffrax
    import jax
    import jax.numpy as jnp

    if not _JAX_READY:
        jax.config.update("jax_enable_x64", True)
        _JAX_READY = True
    return jax, jnp, diffrax


def diffrax_compiled(n: int, tol: tuple[float, float]) -> tuple[Callable[[], Any], float]:
    """The jit-compiled, vmapped solve for ``n`` depths and its compile time (s)."""
    jax, jnp, diffrax = _jax()
    knots = jnp.asarray(P.KNOTS)
    K = len(P.KNOTS) - 1
    zt = jnp.asarray(P.Z_TARGET)

    def vf(t, y, w):
        k = jnp.clip(jnp.searchsorted(knots, t, side="right") - 1, 0, K - 1)
        u = w.reshape(K, P.M)[k]
        p1, p2, w1, w2 = y[0], y[1], y[2], y[3]
        return jnp.stack([
            w1,
            w2,
            -jnp.sin(p1) - P.K_SPRING * (p1 - p2) - P.C_DAMP * w1 + u[0],
            -jnp.sin(p2) - P.K_SPRING * (p2 - p1) - P.C_DAMP * w2 + u[1],
            P.A_RUN * (2 - jnp.cos(p1) - jnp.cos(p2)) + 0.5 * P.RHO * jnp.sum(u ** 2),
        ])

    term = diffrax.ODETerm(vf)
    solver = diffrax.Tsit5()
    controller = diffrax.PIDController(rtol=tol[0], atol=tol[1], jump_ts=knots[1:-1])

    def loss(x, w, p):
        y0 = jnp.concatenate([x, jnp.zeros(1)])
        sol = diffrax.diffeqsolve(term, solver, t0=p, t1=P.Q, dt0=None, y0=y0, args=w,
                                  stepsize_controller=controller,
                                  saveat=diffrax.SaveAt(t1=True), max_steps=4096)
        y = sol.ys[-1]
        zq = y[:P.N]
        return y[P.N] + 0.5 * jnp.sum((zq - zt) ** 2), zq

    value_and_grad = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)

    def one(x, w, p):
        (J, zq), (gx, gw) = value_and_grad(x, w, p)
        return zq, J, gx, gw

    ps = P.depths(n)
    args = (jnp.asarray(P.X0), jnp.asarray(P.W), jnp.asarray(ps))
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(one, in_axes=(None, None, 0))).lower(*args).compile()
    compile_s = time.perf_counter() - t0

    def call() -> dict[str, np.ndarray]:
        z, J, gx, gw = (np.asarray(o) for o in jax.block_until_ready(compiled(*args)))
        return P.fields_from(ps, P.X0, z, J, gx, gw)
    return call, compile_s


# -- measuring -------------------------------------------------------------------------------
@dataclass
class Case:
    tool: str
    tol: tuple[float, float]
    call: Callable[[], Any]
    setup_s: float | None = None          # compile / build time, reported separately
    first_s: float | None = None          # the warm-up call (numba: includes compilation)
    best_s: float = float("inf")
    cpu_s: float = float("nan")           # process CPU time of the best call
    result: Any = None
    errors: dict[str, float] = field(default_factory=dict)


def time_cases(cases: list[Case], repeats: int) -> None:
    """One untimed warm-up per case, then ``repeats`` timed calls of each, interleaved
    (`_machine.interleaved`)."""
    for c, t in zip(cases, interleaved([c.call for c in cases], repeats)):
        c.result, c.first_s, c.best_s, c.cpu_s = t.result, t.first, t.best, t.cpu


#: backend -> the problem its ensemble rows use (None: the shared ``P.problem()``);
#: compile times of the numba backend (first call - second call of a 2-depth solve):
#: "child" in the fresh probe process, "here" in this process (a load from numba's
#: on-disk cache when the child filled it); "cache": which cache the child used.
ENSEMBLE_PROBLEM: dict[str, Any] = {}
COMPILE_S: dict[str, Any] = {}


def _child_probe(backend: str, timeout: float = 600.0) -> tuple[bool, float | None, str]:
    """The probe of ``backend`` in a child process (``--probe``): a compiled backend can
    abort the whole process (an LLVM error is not an exception)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--probe", backend]   # `_probe_main`
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, None, f"no answer within {timeout:.0f} s"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return False, None, f"exit status {proc.returncode}: {tail}"
    found = [line.split("=", 1)[1] for line in proc.stdout.splitlines()
             if line.startswith("compile_s=")]
    return True, (float(found[-1]) if found else None), ""


def prepare_numba(cold: bool, notes: list[str]) -> bool:
    """Whether the numba ensemble runs here, found in a child process before this one
    imports numba. With ``cold`` (or when the child fails with numba's own on-disk
    cache, e.g. a cache left stale by edits of the kernels) ``NUMBA_CACHE_DIR`` is set to
    a fresh temporary folder for the child and this process, so that the child's first
    call is a cold compile."""
    if importlib.util.find_spec("numba") is None:
        notes.append("numba is not installed: the numba rows are skipped")
        return False

    def fresh_cache() -> None:
        path = tempfile.mkdtemp(prefix="bench_ensemble_numba_")
        atexit.register(shutil.rmtree, path, True)
        os.environ["NUMBA_CACHE_DIR"] = path
        COMPILE_S["cache"] = "a fresh NUMBA_CACHE_DIR (cold compile)"

    COMPILE_S["cache"] = "numba's on-disk cache (a load if it was warm)"
    if cold:
        fresh_cache()
    ok, compile_s, err = _child_probe("numba")
    if not ok and not cold:
        notes.append(f"the numba probe failed with numba's own cache ({err}); retried with a "
                     f"fresh NUMBA_CACHE_DIR")
        fresh_cache()
        ok, compile_s, err = _child_probe("numba")
    if not ok:
        notes.append(f"ensemble numba skipped: a 2-depth solve in a child process failed: {err}")
        return False
    COMPILE_S["child"] = compile_s
    return True


def probe_ensemble(support: dict[str, bool], notes: list[str],
                   backends: tuple[str, ...] = ("numpy", "numba")) -> dict[str, bool]:
    """Which ensemble backends run here (a 2-depth solve each). The first call's time
    minus a second call's is the numba compile time. If the numba backend refuses the
    plain ``from_sympy`` problem, ``from_sympy(compile="numba")`` is tried."""
    ok = {"numpy": False, "numba": False}
    if not support["strategy"]:
        notes.append("solve_adjoint has no `strategy` keyword: the ensemble rows are "
                     "skipped (the per-depth loop is all there is)")
        return ok
    if not support["backend"] and "numba" in backends:
        notes.append("solve_adjoint has no `backend` keyword: the numba rows are skipped")
        backends = tuple(b for b in backends if b != "numba")
    for backend in backends:
        candidates = [("from_sympy", None)]
        if backend == "numba":
            candidates.append(("from_sympy(compile='numba')", "numba"))
        failures = []
        for label, compile_ in candidates:
            try:
                pb = P.problem() if compile_ is None else P.make_problem(compile=compile_)
                call = ensemble_call(2, LOOSE, backend, problem=pb)
                t0 = time.perf_counter()
                res = call()
                t1 = time.perf_counter()
                call()
                t2 = time.perf_counter()
                if not res.success:
                    raise RuntimeError(res.message)
            except Exception as exc:  # noqa: BLE001 - report and skip
                text = str(exc).splitlines()[0] if str(exc) else ""
                failures.append(f"{label}: {type(exc).__name__}: {text}")
                continue
            ok[backend] = True
            ENSEMBLE_PROBLEM[backend] = pb
            if backend == "numba":
                COMPILE_S["here"] = max((t1 - t0) - (t2 - t1), 0.0)
            if failures:
                notes.append(f"ensemble {backend} runs on {label} (the plain problem "
                             f"failed: {failures[0]})")
            break
        if not ok[backend]:
            notes.append(f"ensemble {backend} skipped: " + "; ".join(failures))
    return ok



def _probe_main(argv: list[str] | None = None) -> int:
    """The child of `_child_probe`: exit status 0 if the backend runs, and its compile
    time on stdout."""
    import argparse

    ap = argparse.ArgumentParser(prog="_ensemble_cases.py")
    ap.add_argument("--probe", choices=("numpy", "numba"), required=True)
    backend = ap.parse_args(argv).probe
    notes: list[str] = []
    ok = probe_ensemble(adjoint_support(), notes, backends=(backend,))
    print("\n".join(notes), file=sys.stderr)
    print(f"compile_s={COMPILE_S.get('here')}")
    return 0 if ok[backend] else 1


if __name__ == "__main__":
    sys.exit(_probe_main())
