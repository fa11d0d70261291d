"""The reference stage: the classical adjoint method (`solve_adjoint`), exact at every depth,
and its row chunks within a memory budget.
"""
