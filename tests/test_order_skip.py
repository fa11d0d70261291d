"""The order loop skips an order whose ratio test is already known to refuse a pair.

Order ``K + 1``'s ratio test takes the differences ``(d_K, d_(K+1))`` and
``(d_(K+1), d_(K+2))``; order ``K``'s look-ahead has measured the first pair already
(`invimbed._core.sweep.accuracy.Verdict.top`). Where its ratio is above `RATIO_MAX`,
order ``K + 1`` cannot converge the pair, and the next order for it is ``K + 2`` at least
(`invimbed._core.sweep.orders.next_order`; docs/accuracy.md, "How the sweep picks the jet
order"). The sweeps here are synthetic drafts, so that the rule, not an integrator, is
under test: each test counts the orders swept.
"""

from dataclasses import dataclass

import numpy as np
import pytest

from invimbed._core.results.results import DROP, Draft
from invimbed._core.results.status import Status
from invimbed._core.sweep.accuracy import RATIO_FLOOR, RATIO_MAX, assess
from invimbed._core.setup.settings import Accuracy
from invimbed._core.sweep.orders import raise_order


@dataclass
class Setup:
    """What `raise_order` reads of `invimbed._core.setup.arguments.Setup`: one input."""

    depths: np.ndarray
    x: np.ndarray
    permutation: np.ndarray
    depths_desc: np.ndarray
    batched: bool = False


def setup(depths):
    depths = np.asarray(depths, float)
    perm = np.argsort(-depths, kind="stable")
    return Setup(depths, np.zeros((1, 1)), perm, depths[perm])


def draft(n, converged, *, more=1.0, top=np.nan, bound=3.0, ratio=0.5):
    """A sweep's draft of ``n`` depths (one input), every field finite."""
    full = lambda v: np.full(n, v, float)      # noqa: E731
    return Draft(depths=full(-1.0), z=np.zeros((n, 1)), value=full(0.0),
                 adjoint=np.zeros((n, 1)), param_grad=np.zeros((n, 0)),
                 depth_grad=full(0.0), success=bool(np.all(converged)),
                 status=Status.SUCCESS if np.all(converged) else Status.NOT_CONVERGED,
                 message="", nfev=10, warnings=[], converged=np.broadcast_to(
                     np.asarray(converged, bool), (n,)).copy(),
                 series_ratio=full(ratio), _bound=full(bound), _more=full(more),
                 _top=full(top), _nsteps=5)


def loop(first, later, top=6, n=1, order=1):
    """`raise_order` on ``n`` depths: the sweep of the starting ``order`` returns
    ``first``, every later one ``later(K)``; returns the result and the orders swept."""
    swept = []

    def sweep(at, K, budget=None, held=0):
        swept.append(K)
        return first if K == order else later(K, np.size(at.depths))

    res = raise_order(setup(-np.arange(1.0, n + 1)), sweep, order=order, top=top)
    return res, swept


def test_an_order_whose_ratio_test_is_known_to_refuse_is_skipped():
    """After order 1, predicted to need one more order, with the look-ahead's ratio
    ``d_2 / d_1 = 1.01``: order 2 would refuse the pair, so order 3 is swept instead (the
    code before this rule swept order 2)."""
    res, swept = loop(draft(1, False, more=1.0, top=1.01),
                      lambda K, n: draft(n, True, more=0.0, top=0.1))
    assert swept == [1, 3] and res.orders_run == [1, 3]
    assert res.converged[0] and res.depth_order[0] == 3 and res.status == Status.SUCCESS


@pytest.mark.parametrize("top", [RATIO_MAX, 0.5, 0.0, np.nan])
def test_an_order_not_known_to_refuse_is_swept(top):
    """At or below `RATIO_MAX` (0: a negligible pair; NaN: no look-ahead) the next order
    is the predicted one."""
    res, swept = loop(draft(1, False, more=1.0, top=top),
                      lambda K, n: draft(n, True, more=0.0, top=0.1))
    assert swept == [1, 2] and res.converged[0]


def test_a_pair_whose_only_orders_left_pass_max_order_stops_saying_why():
    """At order 5 of ``max_order=6`` with ``d_6 / d_5 = 1.2``: order 6 is certain to be
    refused and order 7 is beyond the top, so nothing more is swept (the code before
    swept order 6); the message names both reasons."""
    res, swept = loop(draft(1, False, more=1.0, top=1.2, bound=2.3, ratio=0.6),
                      lambda K, n: pytest.fail(f"order {K} swept"), order=5, top=6)
    assert swept == [5] and res.orders_run == [5]
    assert res.status == Status.NOT_CONVERGED and not res.converged[0]
    assert "order 6 cannot reach it" in res.message and "d_6 / d_5 = 1.2" in res.message
    assert "order 7 is beyond max_order=6" in res.message
    assert [w.code for w in res.warnings] == ["estimate_large"]


def test_the_skip_is_per_pair():
    """Two depths: the first predicted at order 2 but known to be refused there, the
    second predicted at order 3: one sweep, of order 3, serves both (the code before
    swept orders 2 and 3)."""
    first = draft(2, [False, False]).but(_more=np.array([1.0, 2.0]),
                                         _top=np.array([1.5, 0.3]))
    seen = []

    def later(K, n):
        seen.append((K, n))
        return draft(n, True, more=0.0, top=0.1)

    res, swept = loop(first, later, n=2)
    assert swept == [1, 3] and seen == [(3, 2)]
    assert list(res.depth_order) == [3, 3] and res.converged.all()


def test_next_order():
    from invimbed._core.sweep.orders import next_order

    more = np.array([1.0, 0.2, 3.0, 1.0, np.inf])
    top = np.array([0.9, 0.9, 0.9, 0.1, 0.9])
    assert next_order(4, more, top).tolist() == [6, 6, 7, 5, np.inf]


def test_assess_gives_the_ratio_of_the_look_ahead_pair():
    """`Verdict.top` is ``d_(K+1) / d_K`` (largest over the fields, 0 where both are
    below `RATIO_FLOOR`), the pair order ``K + 1``'s ratio test takes; None without the
    look-ahead."""
    acc = Accuracy(tol=1e-4)
    tol = 1e-4
    fields = {"value": np.zeros((3, 1)), "adjoint": np.zeros((3, 1, 2))}
    # in units of tol: value (d_(K-1), d_K, d_(K+1)) and adjoint's largest component
    lower = {"value": np.array([[9.0], [4.0], [1e-3]]) * tol,
             "adjoint": np.array([[[6.4, 0.1]], [[1.0, 0.0]], [[1e-3, 0.0]]]) * tol}
    est = {"value": np.array([[0.1], [2.0], [2e-3]]) * tol,
           "adjoint": np.array([[[0.37, 0.1]], [[0.5, 0.0]], [[2e-3, 0.0]]]) * tol}
    up = {"value": np.array([[0.01], [0.4], [5e-3]]) * tol,
          "adjoint": np.array([[[0.38, 0.1]], [[0.1, 0.0]], [[5e-3, 0.0]]]) * tol}
    v = assess(np.array([-1.0, -2.0, -3.0]), fields, est, lower, acc, up)
    np.testing.assert_allclose(v.top[:, 0], [0.38 / 0.37, 0.2, 0.0])
    assert v.top[0, 0] > RATIO_MAX and 5e-3 < RATIO_FLOOR
    assert assess(np.array([-1.0, -2.0, -3.0]), fields, est, lower, acc).top is None


def test_the_look_ahead_pair_is_the_next_orders_lower_pair(monkeypatch):
    """What the rule rests on: the differences ``(d_K, d_(K+1))`` that order ``K``'s
    look-ahead measures are those order ``K + 1``'s ratio test takes (the same partial
    sums, up to the two sweeps' integration error), and the sweep's draft carries their
    ratio as ``"_top"``. Pendulum of tests/problems.py, one depth, orders 1 and 2 swept
    alone."""
    import invimbed
    from invimbed._core.sweep import accuracy, orders
    from problems import sympy_pendulum

    chains, tops = [], []
    real, timed = accuracy.orders_needed, orders._timed

    def spy(chain, offset):
        chains.append(chain)
        return real(chain, offset)

    def spy_timed(kind, fn, *args, **kw):
        out, t = timed(kind, fn, *args, **kw)
        tops.append(out.get("_top"))
        return out, t

    monkeypatch.setattr(accuracy, "orders_needed", spy)
    monkeypatch.setattr(orders, "_timed", spy_timed)
    pb, w = sympy_pendulum(), invimbed.Constant([0.2, 0.3])
    for K in (1, 2):
        invimbed.solve_imbedding(pb, [0.5, 0.5], [-1.0], control=w, tol=1e-5, order=K,
                                 max_order=K)
    (low, top), nxt = chains, chains[1]
    ratio = 0.0
    for k in low[-1]:
        d_K, d_K1 = low[1][k].ravel(), low[2][k].ravel()
        # in units of the tolerance at the fields of orders K and K + 1 (whose scales
        # differ where the field does: adjoint's by 11% here), so only their ratio agrees
        if max(d_K[0], d_K1[0]) > RATIO_FLOOR:
            np.testing.assert_allclose(d_K1 / d_K, nxt[1][k].ravel() / nxt[0][k].ravel(),
                                       rtol=1e-3, err_msg=k)
            ratio = max(ratio, d_K1[0] / d_K[0])
    assert ratio > 0.05 and tops[0].ravel()[0] == pytest.approx(ratio, rel=1e-12)


def test_a_ratio_is_not_carried_past_the_sweep_that_measured_it():
    """Order 1's look-ahead ratio (1.5, about order 2) sends the pair to order 3; order 3's
    sweep has no look-ahead (derivatives run out), so nothing is known of order 4's test:
    order 4 is swept next, not order 5."""
    def later(K, n):
        if K == 3:
            return draft(n, False, more=1.0).but(_top=DROP)
        return draft(n, True, more=0.0, top=0.1)

    res, swept = loop(draft(1, False, more=1.0, top=1.5), later)
    assert swept == [1, 3, 4] and res.converged[0] and res.depth_order[0] == 4
