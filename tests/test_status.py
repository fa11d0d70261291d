"""One status vocabulary: `invimbed.Status`, its messages, and every solver's statuses."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import invimbed
from invimbed import (STATUS, Constant, Status, simulate, solve_adjoint, solve_imbedding,
                      solve_optimal)
from invimbed._core.status import RowCode, as_status, row_status

ROOT = pathlib.Path(invimbed.__file__).parent


def test_status_table_is_the_enum():
    assert STATUS == {int(s): s.message for s in Status}
    assert sorted(STATUS) == [-3, -2, -1, 0, 1]
    assert (Status.SUCCESS, Status.UNCHECKED, Status.FAILED, Status.NOT_CONVERGED,
            Status.RAISED) == (0, 1, -1, -2, -3)
    assert STATUS[-2].startswith("not converged") and STATUS[-3].startswith("raised")
    assert [s.success for s in Status] == [s >= 0 for s in Status]
    assert invimbed._core.results.RAISED is Status.RAISED


def test_as_status_names_the_argument():
    assert as_status(-2) is Status.NOT_CONVERGED
    with pytest.raises(ValueError, match=r"`status` must be one of \[-3, -2, -1, 0, 1\].*got 7"):
        as_status(7)


def test_row_codes_map_at_one_boundary():
    assert row_status(np.full((3, 2), RowCode.DONE)) is Status.SUCCESS
    for code in RowCode:
        if code is not RowCode.DONE:
            assert row_status([RowCode.DONE, int(code)]) is Status.FAILED
    # the integrators' and the compiled kernels' plain integers are the table's
    from invimbed._core import failures
    assert (failures.DONE, failures.UNDERFLOW, failures.NONFINITE, failures.MAX_STEPS,
            failures.RUNNING) == (0, 1, 2, 3, 4)
    assert len(set(map(int, RowCode))) == len(RowCode)


def _lq():
    return invimbed.BolzaProblem(
        lambda t, z, th: -z + th,
        lambda t, z, th: 0.5 * (np.sum(z**2, axis=-1) + np.sum(th**2, axis=-1)),
        lambda z: 0.5 * np.sum(z**2, axis=-1), vectorized=True)


@pytest.mark.parametrize("make", [
    lambda P, x: solve_imbedding(P, x, [0.0, -0.5], control=Constant([0.1]), tol=1e-6),
    lambda P, x: solve_imbedding(P, x, [0.0, -0.5], control=Constant([0.1]),
                                 closure="stencil"),
    lambda P, x: solve_imbedding(P, x, [0.0, -3.0], control=Constant([0.1]), max_order=1,
                                 tol=1e-12),
    lambda P, x: solve_imbedding(P, x, [0.0, -0.5], control=Constant([0.1]), tol=1e-9,
                                 max_order=1, fallback="adjoint"),
    lambda P, x: solve_adjoint(P, x, [0.0, -0.5], control=Constant([0.1])),
    lambda P, x: simulate(P, x, lambda t, z: -z, 0.5),
    lambda P, x: solve_optimal(P, x, [0.0, -0.5], n_controls=2, tol=1e-6),
])
def test_every_solver_returns_a_member_of_the_enum(make):
    res = make(_lq(), np.array([[0.3, -0.2], [0.1, 0.4]]))
    assert isinstance(res.status, Status)
    assert res.success == res.status.success or res.status == Status.UNCHECKED


def test_no_decision_on_message_text():
    # a status or a structured field decides, never the wording of a message
    bad = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("startswith", "endswith")
                    and isinstance(node.func.value, ast.Attribute)
                    and node.func.value.attr == "message"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if (isinstance(node, ast.Compare)
                    and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                    and any(isinstance(c, ast.Attribute) and c.attr == "message"
                            or isinstance(c, ast.Subscript)
                            and getattr(c.slice, "value", None) == "message"
                            for c in node.comparators)):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad
