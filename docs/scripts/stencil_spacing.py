"""The stencil's error against its spacing (docs/closures.md, "The stencil's spacing").

The pendulum and Van der Pol problems of ``tests/problems.py`` (constant control 0.1),
at five inputs with zero, tiny and order-one components,
``x = (0, 0.5), (0.7, 0), (1e-4, 0.3), (0.4, -0.3), (2, 1.5)``, and depths 0.1 and 0.3.
Each spacing rule is run with exact derivatives and with the default finite-difference
provider, at integrator ``rtol`` 1e-6 and 1e-10, and compared with the stencil's own
``Delta -> 0`` limit (exact derivatives, ``Delta = 1e-5``, ``rtol=1e-11``): what is left
is the spacing's own error, truncation ``O(Delta^2)`` plus the rounding noise of the
derivatives divided by ``2 Delta``. Printed: the largest relative error of ``z``,
``adjoint`` and ``param_grad`` per problem, provider, tolerance and rule.

Run from the repository root:  python docs/scripts/stencil_spacing.py  (a few seconds)
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

import invimbed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from problems import pendulum_functions, vanderpol_functions  # noqa: E402

RULES = {
    "1e-3 * max(1, |x|) (before)": lambda x: 1e-3 * np.maximum(1.0, np.abs(x)),
    "1e-3 * max(|x|, 1e-3)": lambda x: 1e-3 * np.maximum(np.abs(x), 1e-3),
    "1e-3 * max(|x|, 1e-2) (default)": lambda x: 1e-3 * np.maximum(np.abs(x), 1e-2),
    "1e-3 * max(|x|, 1e-1)": lambda x: 1e-3 * np.maximum(np.abs(x), 1e-1),
    "eps^(1/3) * max(1, |x|)": lambda x: np.finfo(float).eps ** (1 / 3) * np.maximum(1, np.abs(x)),
}


def main() -> None:
    warnings.simplefilter("ignore")
    xs = np.array([[0.0, 0.5], [0.7, 0.0], [1e-4, 0.3], [0.4, -0.3], [2.0, 1.5]])
    depths = [-0.3, -0.1]
    for make in (pendulum_functions, vanderpol_functions):
        fns = make()
        exact = fns.problem()
        fd = invimbed.BolzaProblem(fns.f, fns.R, fns.T, vectorized=True)
        ctrl = invimbed.Constant(np.full(fns.n_theta, 0.1))
        limit = invimbed.solve_imbedding(exact, xs, depths, control=ctrl, closure="stencil",
                                         delta=1e-5, rtol=1e-11, atol=1e-13)
        for name, problem in (("exact", exact), ("finite differences", fd)):
            for rule, spacing in RULES.items():
                for rtol in (1e-6, 1e-10):
                    res = invimbed.solve_imbedding(problem, xs, depths, control=ctrl,
                                                   closure="stencil", delta=spacing(xs),
                                                   rtol=rtol, atol=1e-3 * rtol)
                    err = {k: np.max(np.abs(res[k] - limit[k]) / np.maximum(1, np.abs(limit[k])))
                           for k in ("z", "adjoint", "param_grad")}
                    print(f"{make.__name__[:-10]:9s} {name:18s} rtol={rtol:.0e} {rule:32s} "
                          + "  ".join(f"{k} {v:.1e}" for k, v in err.items()))


if __name__ == "__main__":
    main()
