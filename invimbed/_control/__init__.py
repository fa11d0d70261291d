"""The optimal-control layer: feedback by Theorem 3, open-loop optimisation, shooting.

Built on the core (``invimbed._core``): it imports the core's problems, controls,
solvers and results, and the core imports nothing from it (tests/test_architecture.py).
The mathematics: docs/theory.md, "Optimality"; usage: docs/optimal-control.md and
docs/optimization.md.

Modules, one idea each:

- ``optimal``: `solve_optimal`, the optimal feedback of every depth by one imbedding
  sweep (Theorem 3, eq. (13)).
- ``feedback``: the closed-loop jet, the core's jet closure with the feedback that
  minimises the Hamiltonian.
- ``riccati``: linear-quadratic problems, detected and swept as the matrix Riccati
  equation.
- ``closed_loop``, ``policy``: what the closed-loop sweeps share, and the sweep's own feedback
  (`SweepFeedback`) with the closed-loop check.
- ``simulate``: `simulate`, the closed loop of a feedback (or an open-loop control) and
  its true cost.
- ``residual``: `optimality_residual`, eq. (13) for a control found elsewhere.
- ``optimize``, ``options``: `optimize_control`, direct optimisation of an open-loop
  control, and the split of its solver keywords.
- ``depth``: `optimal_depth`, the depth that minimises the loss.
- ``ocp/``: `solve_ocp` (``solve``), multiple shooting on the exact ensemble
  (``shooting``): the nonlinear program (``nlp``), its constraints, Hessian and solvers
  (IPOPT or scipy).
"""
