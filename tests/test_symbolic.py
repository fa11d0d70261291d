"""The sympy provider and ``from_sympy``: exact derivatives of any order.

The symbolic derivatives are checked against the hand-written tensors of
``tests/problems.py`` (pendulum, Van der Pol), against finite differences of
themselves up to order 5 (``check_derivatives``), and, on a polynomial, against the
polynomial itself (its Taylor coefficients must reproduce ``g(z + delta)`` exactly).
The direct Taylor route must equal the tensor route of the base class; numba must give
the same numbers; code must be generated once per request; strings are never parsed;
and the symbolic, callable and finite-difference providers give the same sweep.
"""

from __future__ import annotations

import re
import subprocess
import sys
from math import factorial
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import invimbed
from invimbed._core.problem.check import check_derivatives
from invimbed._core.derivatives.base import DerivativeProvider
from invimbed._core.derivatives.multiindex import multi_indices
from problems import DERIVATIVE_KEYS, pendulum_functions, vanderpol_functions

sp = pytest.importorskip("sympy")

from invimbed._core.derivatives.symbolic import SympyProvider  # noqa: E402
from invimbed._core.problem.sympy_problem import from_sympy  # noqa: E402

SETTINGS = settings(max_examples=8, deadline=None, derandomize=True)

t, x1, x2, th1, th2 = sp.symbols("t x1 x2 th1 th2")


# -- the test problems in sympy (same parameters as tests/problems.py) ------------------
def pendulum_args(a=1.0, forcing=0.3, omega=1.3, c=0.4, kv=0.2, rho=0.1, sigma=0.15, kT=1.0,
                  target=(0.5, -0.2)):
    phi, v, u, b = x1, x2, th1, th2
    f = [v, -a * sp.sin(phi) - b * v + u + forcing * sp.cos(omega * t)]
    R = c * (1 - sp.cos(phi)) + kv / 2 * v ** 2 + rho / 2 * (u ** 2 + b ** 2) + sigma * v * u
    T = kT * (1 - sp.cos(phi - target[0])) + (v - target[1]) ** 4 / 4
    return (t, [phi, v], [u, b], f, R, T)


def vanderpol_args(alpha=0.3, beta=0.1, kappa=0.2, gamma=0.25, target=(1.0, -0.5)):
    x, v, mu, u = x1, x2, th1, th2
    f = [v, mu * (1 - x ** 2) * v - x + u]
    R = (alpha / 2 * (x ** 2 + v ** 2) + beta / 4 * x ** 4 + kappa / 2 * u ** 2
         + gamma * mu * x * v)
    T = sp.log(1 + (x - target[0]) ** 2 + (v - target[1]) ** 2)
    return (t, [x, v], [mu, u], f, R, T)


def polynomial_args():
    """Polynomials of degree <= 5 in z (and 2 in theta)."""
    f = [x2 ** 2 + th1 * x1 * x2 ** 3, 1 + x1 ** 2 * x2 - th2]
    R = x1 ** 4 * x2 + th1 ** 2 * x2 + t * x1
    T = x1 ** 2 * x2 ** 3 - x1
    return (t, [x1, x2], [th1, th2], f, R, T)


PROBLEMS = {"pendulum": pendulum_args, "vanderpol": vanderpol_args,
            "polynomial": polynomial_args}
HAND = {"pendulum": pendulum_functions, "vanderpol": vanderpol_functions}
_CACHE: dict = {}


def provider(name, compile=None):
    """One provider per problem for the whole module (its code is generated once)."""
    key = (name, compile)
    if key not in _CACHE:
        _CACHE[key] = SympyProvider(*PROBLEMS[name](), compile=compile)
    return _CACHE[key]


points = st.tuples(st.floats(-1.5, 1.5), st.floats(-1.5, 1.5), st.floats(-1.0, 1.0),
                   st.floats(-1.0, 1.0), st.floats(-1.0, 0.0))


def batch(pt, B=3):
    """A small batch around the drawn point (so that rows differ)."""
    rng = np.random.default_rng(7)
    z = np.array(pt[:2]) + 0.3 * rng.standard_normal((B, 2))
    th = np.array(pt[2:4]) + 0.3 * rng.standard_normal((B, 2))
    return pt[4], z, th


# -- against hand-written derivatives ---------------------------------------------------
@pytest.mark.parametrize("name", sorted(HAND))
@SETTINGS
@given(pt=points)
def test_matches_hand_written_derivatives(name, pt):
    pf = HAND[name]()
    prov = provider(name)
    tt, z, th = batch(pt)
    for key in ("f", "R", "T") + DERIVATIVE_KEYS:
        which, dz, dth = invimbed._core.derivatives.parse_key(key) if "_" in key else (key, 0, 0)
        got = prov.derivative(which, tt, z, th, dz=dz, dth=dth)
        want = pf.evaluate(key, tt, z, th)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{name} {key}")


# -- against finite differences, orders up to 5 -----------------------------------------
@pytest.mark.parametrize("name", sorted(PROBLEMS))
@settings(max_examples=3, deadline=None, derandomize=True)
@given(pt=points)
def test_orders_up_to_5_against_finite_differences(name, pt):
    tt, z, th = batch(pt, B=2)
    res = check_derivatives(provider(name), z, th, t=tt, order=5)
    assert res.ok, res
    assert not res.skipped
    assert res.max_error < 1e-7, res
    assert {"f_zzzzz", "R_zzzztheta", "T_zzzzz", "f_theta"} <= set(res.errors)


# -- Taylor coefficients -----------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_taylor_equals_tensor_route(name):
    prov = provider(name)
    _, z, th = batch((0.4, -0.7, 0.3, 0.6, -0.2), B=4)
    for which in ("f", "R", "T"):
        for dth in ((0,) if which == "T" else (0, 1, 2)):
            for order in range(6):
                got = prov.taylor(which, -0.2, z, th, order, dth=dth)
                want = DerivativeProvider.taylor(prov, which, -0.2, z, th, order, dth=dth)
                assert got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12,
                                           err_msg=f"{which} order={order} dth={dth}")


def _poly_eval(coef, delta):
    """``sum_alpha c_alpha delta^alpha`` (coefficients on the last axis)."""
    E = multi_indices(delta.shape[-1], _order(coef.shape[-1], delta.shape[-1]))
    mono = np.prod(delta[:, None, :] ** E[None], axis=-1)   # (B, C)
    return np.einsum("b...c,bc->b...", coef, mono)


def _order(size, n):
    k = 0
    while len(multi_indices(n, k)) < size:
        k += 1
    return k


@SETTINGS
@given(pt=points, seed=st.integers(0, 2 ** 16))
def test_taylor_reproduces_a_polynomial(pt, seed):
    """For a polynomial of degree 5 the degree-5 jet is the polynomial itself, and the
    coefficients beyond degree 5 vanish."""
    prov = provider("polynomial")
    tt, z, th = batch(pt)
    delta = np.random.default_rng(seed).uniform(-1, 1, z.shape)
    for which in ("f", "R", "T"):
        coef = prov.taylor(which, tt, z, th, 6)
        np.testing.assert_allclose(coef[..., len(multi_indices(2, 5)):], 0.0, atol=0)
        want = prov.derivative(which, tt, z + delta, th)
        np.testing.assert_allclose(_poly_eval(coef, delta), want, rtol=1e-11, atol=1e-11)
    # the theta-gradient jet: D_theta f(z + delta) from its coefficients
    coef = prov.taylor("f", tt, z, th, 5, dth=1)
    want = prov.derivative("f", tt, z + delta, th, dth=1)
    np.testing.assert_allclose(_poly_eval(coef, delta), want, rtol=1e-11, atol=1e-11)


def test_polynomial_closed_forms():
    """Hand-computed entries of the polynomial's tensors, in every symmetric position."""
    prov = provider("polynomial")
    z = np.array([[0.7, -1.3], [2.0, 0.5]])
    th = np.array([[0.4, 1.1], [-0.6, 0.2]])
    a, b, c = z[:, 0], z[:, 1], th[:, 0]
    f4 = prov.derivative("f", 0.0, z, th, dz=4)                     # (B, 2, 2, 2, 2, 2)
    for idx in [(0, 1, 1, 1), (1, 0, 1, 1), (1, 1, 0, 1), (1, 1, 1, 0)]:
        np.testing.assert_allclose(f4[(slice(None), 0) + idx], 6 * c)   # d^4 th z1 z2^3
    assert np.all(f4[:, 0, 1, 1, 1, 1] == 0) and np.all(f4[:, 1] == 0)
    f3t = prov.derivative("f", 0.0, z, th, dz=3, dth=1)               # (B, 2, 2, 2, 2, 2)
    np.testing.assert_allclose(f3t[:, 0, 1, 1, 1, 0], 6 * a)
    np.testing.assert_allclose(f3t[:, 0, 0, 1, 1, 0], 6 * b)
    R_thth = prov.derivative("R", 0.0, z, th, dth=2)                  # (B, 2, 2)
    np.testing.assert_allclose(R_thth[:, 0, 0], 2 * b)
    assert np.all(R_thth[:, 1] == 0) and np.all(R_thth[:, :, 1] == 0)
    T5 = prov.derivative("T", 0.0, z, None, dz=5)
    np.testing.assert_allclose(T5[:, 0, 0, 1, 1, 1], 12.0)            # d^5 z1^2 z2^3
    np.testing.assert_allclose(T5[:, 1, 1, 0, 1, 0], 12.0)
    # Taylor coefficient of z1^2 z2^3 in T is 1 whatever the point
    coef = prov.taylor("T", 0.0, z, None, 5)
    j = [tuple(e) for e in multi_indices(2, 5)].index((2, 3))
    np.testing.assert_allclose(coef[:, j], 1.0)
    assert factorial(2) * factorial(3) * coef[0, j] == T5[0, 0, 0, 1, 1, 1]


def test_batches_constants_and_time_only_terms():
    """lambdify returns constant (and t-only) entries as scalars: they are broadcast."""
    prov = SympyProvider(t, [x1], [th1], [sp.cos(t) + 2], running_loss=sp.Integer(3) * th1,
                         terminal_loss=x1)
    for B in (0, 1, 5):
        z = np.linspace(-1, 1, B)[:, None]
        th = np.ones((B, 1))
        np.testing.assert_allclose(prov.derivative("f", 0.3, z, th),
                                   np.full((B, 1), np.cos(0.3) + 2))
        np.testing.assert_allclose(prov.derivative("R", 0.3, z, th, dth=1), np.full((B, 1), 3.0))
        np.testing.assert_allclose(prov.derivative("T", 0.3, z, None, dz=1), np.ones((B, 1)))
        assert prov.derivative("f", 0.3, z, th, dz=2, dth=1).shape == (B, 1, 1, 1, 1)
        assert prov.taylor("T", 0.3, z, None, 3).shape == (B, 4)
        np.testing.assert_allclose(prov.taylor("T", 0.3, z, None, 3), np.c_[z, np.ones((B, 1)),
                                                                            np.zeros((B, 2))])


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_evaluator_equals_derivative(name):
    """The compiled code a loop calls directly gives what `derivative` gives, rows at
    their own times or at one time, constants broadcast."""
    prov = provider(name)
    const = SympyProvider(t, [x1], [th1], [sp.cos(t) + 2], running_loss=sp.Integer(3) * th1)
    _, z, th = batch((0.2, -0.4, 0.5, -0.1, 0.0), B=4)
    for p, zz, tt in ((prov, z, th), (const, z[:, :1], th[:, :1])):
        for times in (0.3, np.array([0.0, 0.3, -0.2, 0.7])):
            for which in ("f", "R"):
                for dz, dth in ((0, 0), (1, 0), (0, 1), (2, 0), (1, 1)):
                    np.testing.assert_array_equal(
                        p.evaluator(which, dz, dth)(times, zz, tt),
                        p.derivative(which, times, zz, tt, dz=dz, dth=dth))
    with pytest.raises(ValueError, match="dth"):
        prov.evaluator("T", 0, 1)


def test_no_controls():
    prov = SympyProvider(t, [x1, x2], [], [x2, -x1 ** 3], terminal_loss=x1 ** 2)
    z = np.array([[0.5, 1.0]])
    assert prov.derivative("f", 0.0, z, None, dth=1).shape == (1, 2, 0)
    assert prov.taylor("f", 0.0, z, None, 2, dth=1).shape == (1, 2, 0, 6)
    np.testing.assert_allclose(prov.derivative("f", 0.0, z, None, dz=3)[0, 1, 0, 0, 0], -6.0)


# -- numba -------------------------------------------------------------------------------
def test_numba_gives_the_same_numbers():
    pytest.importorskip("numba")
    fast, ref = provider("vanderpol", "numba"), provider("vanderpol")
    assert fast.compile == "numba"
    _, z, th = batch((0.2, 0.9, -0.3, 0.5, 0.0), B=6)
    for which, order, dth in [("f", 3, 0), ("R", 2, 1), ("T", 2, 0)]:
        np.testing.assert_allclose(fast.taylor(which, 0.1, z, th, order, dth),
                                   ref.taylor(which, 0.1, z, th, order, dth), rtol=1e-13,
                                   atol=1e-14)
    np.testing.assert_allclose(fast.derivative("f", 0.1, z, th, dz=1, dth=1),
                               ref.derivative("f", 0.1, z, th, dz=1, dth=1), rtol=1e-13)
    # constants and an all-zero request go through the kernel too
    np.testing.assert_allclose(fast.derivative("f", 0.1, z, th, dz=4), 0.0, atol=0)


def test_read_only_inputs_run_the_kernel_compiled_for_writeable_ones():
    """A read-only theta (a control broadcast over the batch) or z runs the generated kernel
    numba compiled for writeable arrays, with the same numbers: one compiled signature per
    kernel, not a second one per read-only argument. The kernel holds the lines of the
    per-sample ``point`` itself: ``point`` is not compiled for it."""
    pytest.importorskip("numba")
    fast = provider("vanderpol", "numba")
    _, z, th = batch((0.2, 0.9, -0.3, 0.5, 0.0), B=4)
    th = np.repeat(th[:1], 4, axis=0)
    want = fast.derivative("f", 0.1, z, th, dz=2, dth=1)
    z_ro = z.copy()
    z_ro.flags.writeable = False
    got = fast.derivative("f", 0.1, z_ro, np.broadcast_to(th[0], th.shape), dz=2, dth=1)
    np.testing.assert_array_equal(got, want)
    module = fast._compiled[("tensor", "f", 2, 1)].fn
    assert len(module.kernel.signatures) == 1
    assert not any(getattr(a, "readonly", False) for a in module.kernel.signatures[0])
    assert not module.point.signatures


_CACHE_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_symbolic import SympyProvider, vanderpol_args
prov = SympyProvider(*vanderpol_args(), compile="numba")
z = np.array([[0.2, 0.9]]); th = np.array([[-0.3, 0.5]])
print(repr(prov.taylor("f", 0.1, z, th, 2, 0).ravel().tolist()))
mods = [m for n, m in sys.modules.items() if n.startswith("invimbed_codegen_")]
print(sum(sum(m.kernel.stats.cache_hits.values()) for m in mods),
      sum(sum(m.kernel.stats.cache_misses.values()) for m in mods))
"""


def test_generated_numba_code_is_cached_on_disk(tmp_path):
    """compile='numba' writes its generated source to $INVIMBED_CACHE/codegen and compiles
    it with numba's cache=True: a second process loads the machine code (cache hits, no
    misses) and gets the same numbers."""
    pytest.importorskip("numba")
    import os

    env = dict(os.environ, INVIMBED_CACHE=str(tmp_path))
    script = _CACHE_SCRIPT.format(tests=str(Path(__file__).parent))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = (r.stdout.split("\n") for r in runs)
    assert first[0] == second[0]                                  # the same numbers
    hits1, misses1 = map(int, first[1].split())
    hits2, misses2 = map(int, second[1].split())
    assert misses1 > 0 and hits1 == 0                             # compiled the first time
    assert hits2 > 0 and misses2 == 0                             # loaded the second time
    sources = list((tmp_path / "codegen").glob("invimbed_codegen_*.py"))
    assert sources and all("def point(t, z, th, out):" in p.read_text() for p in sources)


def test_generated_code_is_never_imported_when_changed_on_disk(tmp_path, monkeypatch):
    """A cached module whose content differs from the source just generated (tampered
    with, or truncated) is rewritten before it is imported."""
    pytest.importorskip("numba")
    from invimbed._core.derivatives import _codegen

    monkeypatch.setenv("INVIMBED_CACHE", str(tmp_path))
    body = ["X = 1"]
    module = _codegen.load(body)
    path = Path(module.__file__)
    del sys.modules[module.__name__]
    path.write_text("raise RuntimeError('tampered')\n")
    again = _codegen.load(body)
    assert again.X == 1
    assert "tampered" not in path.read_text()


def test_generated_code_compiles_in_memory_without_a_cache_folder(tmp_path, monkeypatch):
    """$INVIMBED_CACHE not usable (here: a file): the same code, compiled in memory."""
    pytest.importorskip("numba")
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("INVIMBED_CACHE", str(blocker))
    fresh = SympyProvider(*pendulum_args(kT=1.5), compile="numba")
    _, z, th = batch((0.2, 0.9, -0.3, 0.5, 0.0), B=3)
    got = fresh.taylor("T", 0.0, z, None, 3)
    want = SympyProvider(*pendulum_args(kT=1.5)).taylor("T", 0.0, z, None, 3)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    g = fresh.sample_function("f", 1, 1)
    assert g.__module__.startswith("invimbed_codegen_")
    assert not list(tmp_path.glob("**/invimbed_codegen_*.py"))


def test_numba_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)
    with pytest.raises(ImportError, match=r"pip install invimbed\[numba\]"):
        SympyProvider(*pendulum_args(), compile="numba")


def test_sympy_missing_says_how_to_install(monkeypatch):
    args = pendulum_args()
    monkeypatch.setitem(sys.modules, "sympy", None)
    with pytest.raises(ImportError, match=r"pip install invimbed\[symbolic\]"):
        from_sympy(*args)


def test_import_invimbed_without_sympy():
    code = ("import sys; sys.modules['sympy'] = None; sys.modules['numba'] = None\n"
            "import invimbed, invimbed._core.problem.sympy_problem, invimbed._core.problem.check\n"
            "import invimbed._core.derivatives.symbolic\n"
            "assert sys.modules['sympy'] is None\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# -- caching -----------------------------------------------------------------------------
def test_code_is_generated_once_per_request(monkeypatch):
    calls = {"cse": 0}
    real_cse = sp.cse

    def counting_cse(*args, **kwargs):
        calls["cse"] += 1
        return real_cse(*args, **kwargs)

    monkeypatch.setattr(sp, "cse", counting_cse)
    prov = SympyProvider(*pendulum_args(), taylor_mode=False)   # the symbolic path's code
    _, z, th = batch((0.1, 0.2, 0.3, 0.4, 0.0))
    assert prov.codegen_calls == 0   # nothing is generated before it is asked for
    first = prov.taylor("f", 0.0, z, th, 3)
    assert (prov.codegen_calls, calls["cse"]) == (1, 1)
    second = prov.taylor("f", 0.0, z + 0.1, th, 3)
    assert (prov.codegen_calls, calls["cse"]) == (1, 1)
    assert not np.allclose(first, second)
    prov.taylor("f", 0.0, z, th, 3, dth=1)          # another (which, order, dth)
    prov.derivative("f", 0.0, z, th, dz=3)          # the tensor route is its own request
    assert (prov.codegen_calls, calls["cse"]) == (3, 3)
    prov.derivative("f", 0.5, z, th, dz=3)
    prov.taylor("f", 0.5, z, th, 3, dth=1)
    assert (prov.codegen_calls, calls["cse"]) == (3, 3)
    assert "3 compiled requests" in repr(prov)


# -- inputs ------------------------------------------------------------------------------
@pytest.mark.parametrize("position, name", [(0, "t"), (1, "z"), (2, "theta"), (3, "dynamics"),
                                            (4, "running_loss"), (5, "terminal_loss")])
def test_strings_are_rejected(position, name):
    args = list(pendulum_args())
    args[position] = "x1 + x2" if position != 1 else "x1 x2"
    with pytest.raises(TypeError, match=rf"`{name}` must be a sympy .*not a string"):
        from_sympy(*args)


@pytest.mark.parametrize("position, name", [(1, "z[1]"), (2, "theta[0]"), (3, "dynamics[1]")])
def test_strings_inside_sequences_are_rejected(position, name):
    args = list(pendulum_args())
    seq = list(args[position])
    seq[1 if position != 2 else 0] = "x2"
    args[position] = seq
    with pytest.raises(TypeError, match="`" + re.escape(name) + "`"):
        SympyProvider(*args)


def test_invalid_inputs_name_the_argument():
    T_, z, th, f, R, T = pendulum_args()
    y = sp.Symbol("y")
    with pytest.raises(ValueError, match=r"`dynamics` must hold N = 2 expressions"):
        SympyProvider(T_, z, th, f[:1], R, T)
    with pytest.raises(ValueError, match=r"`running_loss` may depend on t, z and theta only.*y"):
        SympyProvider(T_, z, th, f, R + y, T)
    with pytest.raises(ValueError, match=r"`terminal_loss` may depend on z .* th1"):
        SympyProvider(T_, z, th, f, R, T + th1)
    with pytest.raises(ValueError, match=r"`terminal_loss` may depend on z .* t"):
        SympyProvider(T_, z, th, f, R, T * t)
    with pytest.raises(ValueError, match=r"appears twice"):
        SympyProvider(T_, [x1, x1], th, f, R, T)
    with pytest.raises(ValueError, match=r"appears twice"):
        SympyProvider(x1, z, th, f, R, T)
    with pytest.raises(ValueError, match=r"`compile` must be None or 'numba'"):
        SympyProvider(T_, z, th, f, R, T, compile="cuda")
    with pytest.raises(TypeError, match=r"`running_loss` must be a sympy expression, but got a "
                                        r"callable"):
        SympyProvider(T_, z, th, f, lambda t, z, th: 0.0, T)
    with pytest.raises(TypeError, match=r"`t` must be a sympy Symbol"):
        SympyProvider(1.0, z, th, f, R, T)
    with pytest.raises(ValueError, match=r"undefined functions"):
        SympyProvider(T_, z, th, [f[0], sp.Function("g")(x1)], R, T)
    with pytest.raises(ValueError, match=r"`z` must hold at least one"):
        SympyProvider(T_, [], th, [], R, T)
    prov = provider("pendulum")
    with pytest.raises(ValueError, match=r"`order` must be an integer >= 0"):
        prov.taylor("f", 0.0, np.zeros((1, 2)), np.zeros((1, 2)), -1)
    with pytest.raises(ValueError, match=r"`dth` must be 0"):
        prov.taylor("T", 0.0, np.zeros((1, 2)), None, 2, dth=1)
    with pytest.raises(ValueError, match=r"`z` must have shape \(B, 2\)"):
        prov.taylor("f", 0.0, np.zeros(2), np.zeros((1, 2)), 1)


def test_numbers_and_matrices_are_accepted():
    prov = SympyProvider(t, sp.Matrix([x1, x2]), (), sp.Matrix([x2, 0]), 1.5, 2)
    z = np.array([[1.0, 2.0]])
    np.testing.assert_allclose(prov.derivative("f", 0.0, z, None), [[2.0, 0.0]])
    np.testing.assert_allclose(prov.derivative("R", 0.0, z, None), [1.5])
    np.testing.assert_allclose(prov.derivative("T", 0.0, z, None), [2.0])


# -- from_sympy ---------------------------------------------------------------------------
def test_from_sympy_problem():
    problem = from_sympy(*pendulum_args(), q=0.5)
    pf = pendulum_functions()
    assert isinstance(problem, invimbed.BolzaProblem) and problem.vectorized
    assert problem.q == 0.5
    assert "sympy" in repr(problem)
    z = np.array([[0.3, -0.2], [1.0, 0.4]])
    th = np.array([[0.1, 0.2], [0.3, 0.4]])
    np.testing.assert_allclose(problem.dynamics(0.7, z, th), pf.f(0.7, z, th), rtol=1e-14)
    np.testing.assert_allclose(problem.running_loss(0.7, z, th), pf.R(0.7, z, th), rtol=1e-14)
    np.testing.assert_allclose(problem.terminal_loss(z), pf.T(z), rtol=1e-14)
    # one point at a time works too
    np.testing.assert_allclose(problem.dynamics(0.7, z[0], th[0]), pf.f(0.7, z, th)[0])
    assert np.ndim(problem.terminal_loss(z[1])) == 0
    assert isinstance(problem.provider(2, 2), SympyProvider)
    with pytest.raises(ValueError, match="N=2, M=2"):
        problem.provider(2, 1)
    bare = from_sympy(t, [x1], [], [-x1])
    assert bare.running_loss is None and bare.terminal_loss is None


def test_providers_agree_on_the_sweep():
    """Symbolic, hand-written and finite-difference derivatives give the same order-1
    sweep, to finite-difference accuracy."""
    pf = pendulum_functions()
    problems = {"sympy": from_sympy(*pendulum_args()), "callables": pf.problem(),
                "fd": invimbed.BolzaProblem(pf.f, pf.R, pf.T, vectorized=True)}
    x = np.array([[0.4, -0.3], [-0.2, 0.5]])
    kw = dict(control=invimbed.Constant([0.2, 0.3]), closure="jet", order=1, rtol=1e-10,
              atol=1e-12)
    res = {k: invimbed.solve_imbedding(p, x, [-0.8, -0.3], **kw) for k, p in problems.items()}
    for k in ("z", "value", "adjoint", "param_grad", "depth_grad"):
        np.testing.assert_allclose(res["sympy"][k], res["callables"][k], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(res["sympy"][k], res["fd"][k], rtol=1e-6, atol=1e-8)
    for k in ("z", "value", "adjoint"):
        np.testing.assert_allclose(res["sympy"].error_estimate[k],
                                   res["callables"].error_estimate[k], rtol=1e-8, atol=1e-12)


def test_high_order_jets_converge_to_the_adjoint_reference():
    """The reason for the provider: jets of order K > 3 need derivatives no finite
    difference can give; with them the sweep approaches the classical reference."""
    problem = from_sympy(*pendulum_args())
    kw = dict(control=invimbed.Constant([0.2, 0.3]), rtol=1e-11, atol=1e-13)
    ref = invimbed.solve_adjoint(problem, [0.4, -0.3], [-0.8], **kw)
    errs = [np.abs(invimbed.solve_imbedding(problem, [0.4, -0.3], [-0.8], order=K,
                                            estimate_error=False, **kw).z - ref.z).max()
            for K in (1, 3, 5)]
    assert errs[0] > 10 * errs[1] > 100 * errs[2], errs


def test_symbolic_tensors_are_available():
    prov = SympyProvider(*vanderpol_args())
    J = prov.expression("f", dz=1)
    assert J.shape == (2, 2)
    want = sp.Matrix(vanderpol_args()[3]).jacobian([x1, x2])
    assert all(sp.simplify(J[i, j] - want[i, j]) == 0 for i in range(2) for j in range(2))
    assert prov.expression("R", dz=1, dth=1).shape == (2, 2)
    assert prov.expression("T") == prov.expressions["T"]
