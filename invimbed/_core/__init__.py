"""The core layer: Bolza problems, their derivatives, and the solvers of every depth.

Everything the public solvers `invimbed.solve_imbedding` and `invimbed.solve_adjoint`
need, and nothing above them (docs/theory.md gives the mathematics).

Modules, one idea each:

- ``problem``: `BolzaProblem`, the problem ``f``, ``R``, ``T``, ``q`` (eqs. (1), (4));
  knows nothing of solvers.
- ``sympy_problem``: `from_sympy`, problems from sympy expressions.
- ``open_loop``: the open-loop control objects ``theta(t; w)`` (`Constant`,
  `PiecewiseConstant`, `Control`).
- ``derivatives/``: derivative providers (callables, finite differences, traced and
  symbolic derivatives), all behind one interface.
- ``check``, ``derivative_guard``: `check_derivatives`, and the check the solvers make
  of user derivatives at their first point.
- ``closures/``: the jet, stencil and cropping closures (docs/theory.md, "The
  closures"), which turn the fields into plain right-hand sides in depth.
- ``integrators/``: integration in depth, in one place: the checked Butcher tableaux
  (``tableau``), the registry of methods (``methods``), scipy's OdeSolver loop, fixed-step
  Runge-Kutta, the row ensemble and the paper's layers.
- ``imbedding``: the sweep of every depth, `solve_imbedding` (Algorithm 1).
- ``orders``, ``accuracy``, ``fallback``, ``sweep_memory``, ``dense``: the sweep's jet
  order loop, accuracy verdict, exact fallback, memory budget and dense output.
- ``adjoint``, ``budget``: the classical adjoint method, `solve_adjoint`, and its row
  chunks within a memory budget.
- ``arguments``, ``validation``, ``probe``, ``row_times``, ``size_errors``: the user's
  arguments read once, every check of them, and the diagnosis of a user function's
  first call.
- ``status``, ``results``, ``assembly``, ``failures``: the `Status` codes, the typed
  result, its assembly in one place, and every failure message.
- ``backends``: the registry the compiled backends (numba, cupy) register with.
- ``compile_cost``: whether a compiled kernel is ready on this machine (a first run
  compiles only what pays), and the announcement of a compilation that is not cached.
- ``namespace``, ``ordered``: the array namespace (numpy or cupy) and sums in a fixed
  order.

Layers: ``_core`` imports nothing from ``invimbed._backends``, ``invimbed._control``,
``invimbed._learning``, ``invimbed.nn`` or ``invimbed.experiments``. Compiled backends
register themselves with the core; the optimal-control (``_control``), learning
(``_learning``) and PyTorch (``nn``) layers import from ``_core``, never the reverse
(tests/test_architecture.py checks it).
"""
