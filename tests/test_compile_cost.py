"""A first run compiles no numba kernel it does not need (docs/performance.md, "Compiled
kernels and the first run on a machine"): the Taylor tape's and the jet contraction's
kernels run only where they are ready or where the work repays their compilation, and
the numpy route they replace gives the same numbers."""

import numpy as np
import pytest

numba = pytest.importorskip("numba")
sp = pytest.importorskip("sympy")

from invimbed._core import compile_cost  # noqa: E402
from invimbed._core.closures import jet  # noqa: E402
from invimbed._core.derivatives import taylor_mode  # noqa: E402
from invimbed._core.derivatives.symbolic import SympyProvider  # noqa: E402


def test_ready_is_false_before_the_first_compilation_and_true_after():
    @numba.njit
    def twice(x):
        return 2 * x

    assert not compile_cost.ready(twice)
    twice(1.0)
    assert compile_cost.ready(twice)
    assert not compile_cost.ready(object())         # not a dispatcher: not known ready


def provider_args():
    t, a, b, u = sp.symbols("t a b u")
    return (t, [a, b], [u], [b, -sp.sin(a) + u * sp.cos(b)], (1 - sp.cos(a)) + u**2,
            a**2 + b**2)


@pytest.mark.parametrize("is_ready", [False, True])
def test_taylor_mode_runs_the_kernel_only_where_ready_or_large(monkeypatch, is_ready):
    calls = []
    real = taylor_mode.evaluate

    def numpy_evaluate(*args):
        calls.append("numpy")
        return real(*args)

    def kernel_evaluate(*args):         # the kernel is not compiled here: only chosen
        calls.append("numba")
        return real(*args)

    from invimbed._core.derivatives import _taylor_numba

    monkeypatch.setattr(taylor_mode, "evaluate", numpy_evaluate)
    monkeypatch.setattr(_taylor_numba, "evaluate", kernel_evaluate)
    monkeypatch.setattr(compile_cost, "ready", lambda kernel: is_ready)
    prov = SympyProvider(*provider_args())
    assert prov._jets.engine == "auto"
    z, th = np.array([[0.3, -0.2]]), np.array([[0.4]])
    ref = SympyProvider(*provider_args(), taylor_mode=False)
    for K in (2, 3):                              # degrees 4, 5: small tables
        calls.clear()
        got = prov.taylor("f", 0.1, z, th, K + 2, 1)
        assert calls == (["numba"] if is_ready else ["numpy"])
        np.testing.assert_allclose(got, ref.taylor("f", 0.1, z, th, K + 2, 1), rtol=0,
                                   atol=1e-12 * np.abs(got).max())
    assert prov._jets._compiled(4, 8)         # C(16, 8) pairs: compiled, ready or not
    assert prov._jets._compiled(2, 4) == is_ready


def test_jet_contraction_compiles_only_large_tables_where_not_ready(monkeypatch):
    monkeypatch.setattr(compile_cost, "ready", lambda kernel: False)
    assert jet._compiled(jet._COMPILE_FROM - 1) is None
    assert jet._compiled(jet._COMPILE_FROM) is not None
    monkeypatch.setattr(compile_cost, "ready", lambda kernel: True)
    assert jet._compiled(500) is not None
