"""The core layer: Bolza problems, their derivatives, and the solvers of every depth.

Everything the public solvers `invimbed.solve_imbedding` and `invimbed.solve_adjoint`
need, and nothing above them (docs/theory.md gives the mathematics).

Folders, one stage of a solve each (docs/package-map.md; lowest first, and each imports
only itself and the folders above it in this list, tests/test_architecture.py):

- ``results/``: the `Status` codes, the result types and every failure message.
- ``inputs/``: every check of the user's arguments (``validation``), the diagnosis of a
  wrong size (``size_errors``) and of a user function's first call (``probe``).
- ``runtime/``: the backend registry (``backends``), the array namespace (numpy or cupy),
  sums in a fixed order, user functions at per-row times, and whether a compiled kernel
  is ready (``compile_cost``).
- ``derivatives/``: derivative providers (callables, finite differences, traced and
  symbolic derivatives) behind one interface, and the check the solvers make of user
  derivatives at their first point (``guard``).
- ``problem/``: `BolzaProblem` (``bolza``; eqs. (1), (4)), `from_sympy`, the open-loop
  controls ``theta(t; w)`` and `check_derivatives`.
- ``closures/``: the jet, stencil and cropping closures (docs/theory.md, "The closures").
- ``integrators/``: integration in depth: the checked Butcher tableaux, the registry of
  methods, scipy's OdeSolver loop, fixed-step Runge-Kutta and the row ensemble.
- ``setup/``: the user's arguments to a solver read once into a `Setup`.
- ``sweep/``: `solve_imbedding` (``imbedding``, Algorithm 1) with its order loop, accuracy
  verdict, exact fallback, memory budget, dense output and result assembly.
- ``reference/``: `solve_adjoint`, the classical adjoint method exact at every depth
  (``adjoint``), and its row chunks within a memory budget.

Layers: ``_core`` imports nothing from ``invimbed._backends``, ``invimbed._control``,
``invimbed._learning``, ``invimbed.nn`` or ``invimbed.experiments``. Compiled backends
register themselves with the core; the optimal-control (``_control``), learning
(``_learning``) and PyTorch (``nn``) layers import from ``_core``, never the reverse
(tests/test_architecture.py checks it).
"""
