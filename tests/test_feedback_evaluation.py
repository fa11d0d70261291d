"""The feedback sweep's evaluation paths against the per-call definitions they replace.

`solve_optimal`'s HJB sweep (invimbed._control.feedback) evaluates, at every right-hand
side, the Hamiltonian's terms through the provider's `evaluator` code (no per-call
checks), the joint Taylor coefficients one derivative tensor at a time
(`DerivativeProvider.taylor_joint`), the feedback jet's first pass without the zero
monomials, and ``f`` and ``R`` composed in one call. Each is compared here, bit for bit,
with the plain definition built from `DerivativeProvider.derivative` on
hypothesis-generated states and controls.
"""

from __future__ import annotations

from math import factorial

import numpy as np
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import invimbed
from invimbed._control.feedback import FeedbackJetClosure, _z_part, optimality_gradient
from invimbed._core.derivatives.multiindex import (compose_split, monomials, multi_indices,
                                                   n_coefficients)
from invimbed._core.runtime.namespace import array_namespace

t_, z1, z2, u1, u2 = sp.symbols("t z1 z2 u1 u2")
SYMPY = invimbed.from_sympy(
    t_, [z1, z2], [u1, u2],
    [z2 * sp.cos(u1) + u2 * z1 ** 2, -sp.sin(z1) + u1 * u2 + t_ * z2],
    (z1 ** 2 + z2 ** 2) / 2 + u1 ** 2 + sp.exp(u2 / 3) * z1 + u1 * u2 ** 3 / 5,
    z1 ** 4 / 4 + z2 ** 2).derivative_provider
# plain per-sample callables, traced (a sympy provider) and by finite differences (the
# base provider, its `evaluator` the checked `derivative`)
CALLS = (lambda t, z, u: np.array([z[1] * np.cos(u[0]) + u[1] * z[0] ** 2,
                                   -np.sin(z[0]) + u[0] * u[1]]),
         lambda t, z, u: 0.5 * z @ z + u[0] ** 2 + np.exp(u[1] / 3) * z[0],
         lambda z: z[0] ** 4 / 4 + z[1] ** 2)
PROVIDERS = (SYMPY, invimbed.BolzaProblem(*CALLS).provider(2, 2),
             invimbed.BolzaProblem(*CALLS, derivatives="finite-differences").provider(2, 2))

finite = st.floats(-1.5, 1.5, allow_nan=False)
rows = st.integers(1, 3).flatmap(lambda B: st.tuples(
    st.lists(finite, min_size=2 * B, max_size=2 * B), st.lists(finite, min_size=2 * B, max_size=2 * B)))


def _arrays(zs, ths):
    B = len(zs) // 2
    return np.array(zs).reshape(B, 2), np.array(ths).reshape(B, 2)


def joint_by_entries(prov, which, t, z, theta, order):
    """The joint Taylor coefficients entry by entry, ``D^(alpha, beta) g / (alpha! beta!)``
    from `derivative` (the definition of `DerivativeProvider.taylor_joint`)."""
    N, M = prov.n_state, prov.n_theta
    lead = (z.shape[0],) + prov.out_shape(which)
    E = multi_indices(N + M, order)
    out = np.empty(lead + (len(E),))
    for i, e in enumerate(E):
        ez, et = [int(v) for v in e[:N]], [int(v) for v in e[N:]]
        if which == "T" and sum(et):
            out[..., i] = 0.0
            continue
        tensor = prov.derivative(which, t, z, theta, dz=sum(ez), dth=sum(et))
        pos = tuple(j for j in range(N) for _ in range(ez[j])) + \
            tuple(j for j in range(M) for _ in range(et[j]))
        fact = float(np.prod([factorial(v) for v in ez + et]))
        out[..., i] = tensor[(Ellipsis,) + pos] / fact
    return out


@settings(max_examples=15, deadline=None, derandomize=True)
@given(rows, st.floats(-1.0, 0.0), st.sampled_from([1, 2, 3]))
def test_joint_coefficients_equal_the_entries_of_the_derivative_tensors(zth, t, order):
    z, theta = _arrays(*zth)
    for prov in PROVIDERS:
        if prov is SYMPY and prov._jets is not None and prov._jets.use(order, 0):
            continue                       # Taylor mode: tests/test_taylor_mode.py
        for which in ("f", "R", "T"):
            if prov.max_order is not None and order > prov.max_order:
                continue
            got = prov.taylor_joint(which, t, z, theta, order)
            want = joint_by_entries(prov, which, t, z, theta, order)
            np.testing.assert_array_equal(got, want, err_msg=f"{which} order {order}")


@settings(max_examples=15, deadline=None, derandomize=True)
@given(rows, st.lists(st.floats(-1.0, 0.0), min_size=3, max_size=3), st.sampled_from([1, 2, 3]),
       st.booleans())
def test_generated_joint_coefficients_in_one_pass_equal_the_block_wise_ones(zth, ts, order,
                                                                         row_times):
    """A numpy sympy provider calls its requests' code in one pass
    (`invimbed._core.derivatives._joint_code`): the same numbers as the base's
    construction, one tensor per block, bit for bit (per-row times too)."""
    from invimbed._core.derivatives.base import DerivativeProvider

    z, theta = _arrays(*zth)
    t = np.array(ts[:z.shape[0]]) if row_times else ts[0]
    for prov in PROVIDERS[:2]:                 # from_sympy, traced
        assert prov.compile is None
        if prov._jets is not None and prov._jets.use(order, 0):
            continue
        for which in ("f", "R", "T"):
            for th in (theta, None):
                got = prov.taylor_joint(which, t, z, th, order)
                want = DerivativeProvider.taylor_joint(prov, which, t, z, th, order)
                assert got.tobytes() == want.tobytes() and got.shape == want.shape, (
                    which, order)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(rows, st.lists(finite, min_size=6, max_size=6))
def test_hamiltonian_terms_equal_the_derivative_formulas(zth, lams):
    """``H``, ``H_theta``, ``H_thetatheta`` through the provider's code (no per-call
    checks; ``H`` reused where the line search computed it) equal the formulas of
    `derivative`, bit for bit."""
    z, theta = _arrays(*zth)
    lam = np.resize(np.array(lams), z.shape)
    p = -0.3
    for prov in PROVIDERS:
        clo = FeedbackJetClosure(prov, z, 0.0, 2, order=1)
        H, g, Hm = clo.hamiltonian_terms(p, theta, lam)
        d = prov.derivative
        np.testing.assert_array_equal(
            H, d("R", p, z, theta) + np.einsum("bi,bi->b", lam, d("f", p, z, theta)))
        np.testing.assert_array_equal(g, optimality_gradient(prov, p, z, theta, lam))
        np.testing.assert_array_equal(Hm, d("R", p, z, theta, dth=2) + np.einsum(
            "bi,bimn->bmn", lam, d("f", p, z, theta, dth=2)))
        np.testing.assert_array_equal(clo.hamiltonian(p, theta, lam), H)
        np.testing.assert_array_equal(clo.hamiltonian_gradient(p, theta, lam), g)
        assert clo.hamiltonian_terms(p, theta, lam, H=H)[0] is H
        # the control-affine step reads no H: not computed, the other two the same bits
        none, g2, Hm2 = clo.hamiltonian_terms(p, theta, lam, value=False)
        assert none is None
        np.testing.assert_array_equal(g2, g)
        np.testing.assert_array_equal(Hm2, Hm)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.integers(1, 3), st.integers(1, 2), st.integers(1, 3), st.integers(0, 2 ** 31))
def test_composition_at_zero_feedback_is_the_coefficients_without_theta(N, M, K, seed):
    """The feedback jet's first pass: composing with ``psi = 0`` (`compose_split` with the
    monomials of zero) gives the joint coefficients whose ``theta`` part is zero."""
    rng = np.random.default_rng(seed)
    B = 2
    coef = rng.normal(size=(B, 3, n_coefficients(N + M, K)))
    zero = np.zeros((B, M, n_coefficients(N, K)))
    want = compose_split(coef, monomials(zero, N, K), N, M, K)
    np.testing.assert_array_equal(coef[..., _z_part(N, M, K)], want)


def test_f_and_r_composed_together_as_apart():
    """Composing ``f`` and ``R`` in one `compose_split` call gives each row's sums of two
    calls, bit for bit (the closed loop's ``Phi`` and ``R``)."""
    rng = np.random.default_rng(7)
    N, M, L, B = 2, 2, 3, 3
    Fj = rng.normal(size=(B, N, n_coefficients(N + M, L)))
    Rj = rng.normal(size=(B, n_coefficients(N + M, L)))
    psi = rng.normal(size=(B, M, n_coefficients(N, L)))
    psi[..., 0] = 0.0
    mon = monomials(psi, N, L)
    both = compose_split(np.concatenate([Fj, Rj[:, None]], axis=1), mon, N, M, L)
    np.testing.assert_array_equal(both[:, :N], compose_split(Fj, mon, N, M, L))
    np.testing.assert_array_equal(both[:, N], compose_split(Rj, mon, N, M, L))


def test_array_namespace_of_numpy_arrays_is_numpy():
    assert array_namespace(np.zeros(3), np.ones((2, 2), dtype=np.int64), 1.0, None) is np

    class Traced:                    # an object array is still looked into
        __invimbed_namespace__ = "traced"

    assert array_namespace(np.zeros(2), np.array([Traced()], dtype=object)) == "traced"
