"""Learning dynamics from end points (the paper's Appendix C and E.2).

``model`` (`MLPDynamics`, a tanh network with exact derivative tensors), ``regression``
(`endpoint_loss`: the per-depth regression of eqs. (25) to (28) by imbedding sweeps) and
``training`` (`fit_endpoint_dynamics`: Adam, gradient descent or scipy's L-BFGS-B).
"""
