"""Optimal control problems by multiple shooting on the exact ensemble (`solve_ocp`): the
nonlinear program, its constraints, Hessian and solvers (IPOPT or scipy).
"""
