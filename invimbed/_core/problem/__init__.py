"""The problem stage: the Bolza problem, problems from sympy, open-loop controls, and the
check of a problem's derivatives.
"""
