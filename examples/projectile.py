"""The projectile of the paper's Figure 1, as a plain script.

This is what ``python -m invimbed demo`` does, written out step by step.

A ball is thrown upwards at time ``t = p`` from height ``h0`` with speed ``v0`` and flies
under gravity until the fixed time ``q``. In the language of the paper the throw time
``p`` is the *depth* of a network whose input is ``x = [h0, v0]`` and whose output is the
state at ``q``. Invariant imbedding computes that output, the loss and its gradients
for every depth ``p`` in one integration in ``p``, with no forward pass in ``t``.

Run:  python examples/projectile.py            (add --plot FILE for a figure)
"""

import sys

import numpy as np

import invimbed

# --- the problem -------------------------------------------------------------------
g = 9.81            # gravitational acceleration, m/s^2
q = 1.0             # landing time: the output end of the depth interval [p, q]
h_target = 5.0      # the terminal loss asks the ball to be at 5 m at t = q


def dynamics(t, z, theta):
    """dz/dt = f(t, z) = [v, -g] for z = [h, v] (no control: theta is empty)."""
    return np.array([z[1], -g])


def terminal_loss(z):
    """T(z) = (h - h_target)^2 / 2."""
    return 0.5 * (z[0] - h_target) ** 2


# Exact derivatives (output axes first, then z axes). They are optional: without them
# invimbed uses finite differences, but the jet closure of order 1 with its error estimate
# needs derivatives up to order 3, and third differences are noisy.
derivatives = {
    "f_z": lambda t, z, th: np.array([[0.0, 1.0], [0.0, 0.0]]),
    "f_zz": lambda t, z, th: np.zeros((2, 2, 2)),
    "f_zzz": lambda t, z, th: np.zeros((2, 2, 2, 2)),
    "T_z": lambda z: np.array([z[0] - h_target, 0.0]),
    "T_zz": lambda z: np.array([[1.0, 0.0], [0.0, 0.0]]),
    "T_zzz": lambda z: np.zeros((2, 2, 2)),
}
problem = invimbed.BolzaProblem(dynamics, terminal_loss=terminal_loss, q=q,
                                derivatives=derivatives)

# --- the input and the depths --------------------------------------------------------
x = np.array([0.0, 10.0])              # thrown from the ground at 10 m/s
depths = np.linspace(q, -1.0, 21)      # throw times from q (no flight) down to -1 (2 s)

# --- one imbedding sweep gives every depth ----------------------------------------------
imb = invimbed.solve_imbedding(problem, x, depths, closure="jet", rtol=1e-8, atol=1e-10)

# --- the classical reference: a forward and a backward solve for each depth -------------
adj = invimbed.solve_adjoint(problem, x, depths, rtol=1e-8, atol=1e-10)

# --- the closed form ---------------------------------------------------------------------
s = q - depths                                     # flight time
h_exact = x[0] + x[1] * s - 0.5 * g * s ** 2
v_exact = x[1] - g * s
value_exact = 0.5 * (h_exact - h_target) ** 2

print(f"{'p':>6} {'h imbedding':>13} {'h adjoint':>13} {'h exact':>13} "
      f"{'V imbedding':>13} {'V adjoint':>13} {'|diff V|':>9}")
for i, p in enumerate(depths):
    print(f"{p:6.2f} {imb.z[i, 0]:13.8f} {adj.z[i, 0]:13.8f} {h_exact[i]:13.8f} "
          f"{imb.value[i]:13.8f} {adj.value[i]:13.8f} {abs(imb.value[i] - adj.value[i]):9.1e}")
print(f"nfev: imbedding {imb.nfev} (one sweep), adjoint {adj.nfev} (per depth)")

# The dynamics are affine in z and the loss quadratic, so the jet of order 1 is exact
# and everything agrees to integrator tolerance (docs/theory.md, "The closures").
np.testing.assert_allclose(imb.z, np.stack([h_exact, v_exact], axis=1), atol=1e-7)
np.testing.assert_allclose(imb.value, value_exact, atol=1e-7)
np.testing.assert_allclose(imb.adjoint, adj.adjoint, atol=1e-7)      # grad_x J
np.testing.assert_allclose(imb.depth_grad, adj.depth_grad, atol=1e-7)  # dJ/dp
print("imbedding == adjoint == closed form")

# --- optional figure ---------------------------------------------------------------------
if "--plot" in sys.argv:
    import matplotlib.pyplot as plt   # pip install invimbed[plot]

    path = sys.argv[sys.argv.index("--plot") + 1]
    fig, (ax_h, ax_v) = plt.subplots(1, 2, figsize=(9, 3.5), sharex=True)
    for ax, k, label in ((ax_h, 0, "h(q)"), (ax_v, 1, "v(q)")):
        ax.plot(depths, imb.z[:, k], "-", label="imbedding (one sweep)")
        ax.plot(depths, adj.z[:, k], "o", mfc="none", label="adjoint (per depth)")
        ax.set_xlabel("depth p")
        ax.set_ylabel(label)
    ax_h.invert_xaxis()
    ax_h.legend()
    fig.savefig(path)
    print(f"wrote {path}")
