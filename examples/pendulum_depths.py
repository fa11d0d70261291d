"""A nonlinear pendulum with a constant torque: every depth in one sweep.

    z = [phi, omega],  d phi/dt = omega,  d omega/dt = -sin(phi) - c omega + u,
    J(u; p, x) = int_p^q rho u^2 / 2 dt + ((phi(q) - phi_target)^2 + omega(q)^2) / 2,

with the torque ``u`` a constant control (``invimbed.Constant``), so that the sweep also
returns ``dJ/du`` at every depth (eq. (32)).

The dynamics are not affine, so the jet closure of order 1 is not exact: its error
grows like ``s^3`` in the depth ``s = q - p`` and does not shrink when the integrator's
tolerance is tightened (docs/theory.md, "The closures"). The jet carries order 2 alongside and
reports the difference as ``error_estimate``; this script checks the estimate against
the true error, measured with the classical adjoint method (``solve_adjoint``), and
shows that raising the order to 2 removes most of it.

Run:  python examples/pendulum_depths.py
"""

import numpy as np

import invimbed

c = 0.1                # damping
rho = 0.05             # weight of the control effort
phi_target = 1.5       # where the pendulum should be at t = q (rad)
q = 0.0


def dynamics(t, z, theta):
    phi, omega = z
    return np.array([omega, -np.sin(phi) - c * omega + theta[0]])


def running_loss(t, z, theta):
    return 0.5 * rho * theta[0] ** 2


def terminal_loss(z):
    return 0.5 * ((z[0] - phi_target) ** 2 + z[1] ** 2)


def f_z(t, z, theta):           # d f_i / d z_j
    return np.array([[0.0, 1.0], [-np.cos(z[0]), -c]])


def f_zz(t, z, theta):          # d^2 f_i / d z_j d z_k: only d^2 f_1 / d phi^2
    out = np.zeros((2, 2, 2))
    out[1, 0, 0] = np.sin(z[0])
    return out


def f_zzz(t, z, theta):
    out = np.zeros((2, 2, 2, 2))
    out[1, 0, 0, 0] = np.cos(z[0])
    return out


derivatives = {
    "f_z": f_z, "f_zz": f_zz, "f_zzz": f_zzz,
    "f_theta": lambda t, z, th: np.array([[0.0], [1.0]]),      # d f / d u
    "f_ztheta": lambda t, z, th: np.zeros((2, 2, 1)),
    "R_theta": lambda t, z, th: np.array([rho * th[0]]),
    "T_z": lambda z: np.array([z[0] - phi_target, z[1]]),
    "T_zz": lambda z: np.eye(2),
    "T_zzz": lambda z: np.zeros((2, 2, 2)),
}
problem = invimbed.BolzaProblem(dynamics, running_loss, terminal_loss, q=q,
                                derivatives=derivatives)
control = invimbed.Constant([0.4])     # u = 0.4
x = np.array([1.0, 0.5])               # phi = 1 rad, omega = 0.5 rad/s at t = p
depths = np.linspace(q, -1.5, 16)      # s = q - p from 0 to 1.5
tol = dict(rtol=1e-10, atol=1e-12)

# One sweep: jet of order 1, carrying order 2 alongside for the error estimate.
imb = invimbed.solve_imbedding(problem, x, depths, control=control, order=1, **tol)
# The same with the jet of order 2 (no estimate), to show that the order is what matters.
imb2 = invimbed.solve_imbedding(problem, x, depths, control=control, order=2,
                                estimate_error=False, **tol)
# The reference: a forward and a backward solve for each depth.
adj = invimbed.solve_adjoint(problem, x, depths, control=control, **tol)
assert imb.success and imb2.success and adj.success

err_z = np.abs(imb.z - adj.z).max(axis=1)
est_z = imb.error_estimate.z.max(axis=1)
err_z2 = np.abs(imb2.z - adj.z).max(axis=1)
err_g = np.abs(imb.param_grad - adj.param_grad)[:, 0]
est_g = imb.error_estimate.param_grad[:, 0]

print("pendulum with constant torque u = 0.4, x = [phi, omega] = [1, 0.5], q = 0")
print(f"{'p':>6} {'phi(q)':>11} {'dJ/du':>11} {'dJ/dp':>11} | {'|err z|':>8} {'est z':>8} "
      f"{'order 2':>8} | {'|err dJ/du|':>11} {'est':>8}")
for i, p in enumerate(depths):
    print(f"{p:6.2f} {imb.z[i, 0]:11.7f} {imb.param_grad[i, 0]:11.7f} {imb.depth_grad[i]:11.7f} | "
          f"{err_z[i]:8.1e} {est_z[i]:8.1e} {err_z2[i]:8.1e} | {err_g[i]:11.1e} {est_g[i]:8.1e}")
print(f"nfev: imbedding order 1 + estimate {imb.nfev}, order 2 {imb2.nfev} (one sweep each); "
      f"adjoint {adj.nfev} ({depths.size} depths)")

# The error of order 1 grows like s^3 at small depth: fit the log-log slope.
s = q - depths
small = (s > 0) & (s <= 0.5)
slope = np.polyfit(np.log(s[small]), np.log(err_z[small]), 1)[0]
print(f"log-log slope of the order-1 error in z at s <= 0.5: {slope:.2f} (theory: 3)")
assert 2.5 < slope < 3.5

# The estimate (order 1 vs order 2) tracks the true error within a factor of 2 ...
deep = s > 0
ratio = est_z[deep] / err_z[deep]
print(f"estimate / true error of z: between {ratio.min():.2f} and {ratio.max():.2f}")
assert np.all((ratio > 0.5) & (ratio < 2.0))
# ... and so does the estimate of dJ/du.
assert np.all(est_g[deep] < 2.0 * err_g[deep] + 1e-9)
assert np.all(err_g[deep] < 2.0 * est_g[deep] + 1e-9)
# Order 2 is at least ten times more accurate at every depth.
assert np.all(err_z2[deep] < 0.1 * err_z[deep])
# The depth gradient dJ/dp = -(Lam . f + R) comes from fields the sweep already carries;
# its error is that of Lam, and order 2 shrinks it too.
err_p1 = np.abs(imb.depth_grad - adj.depth_grad).max()
err_p2 = np.abs(imb2.depth_grad - adj.depth_grad).max()
print(f"largest error of dJ/dp: order 1 {err_p1:.1e}, order 2 {err_p2:.1e}")
assert err_p2 < 0.1 * err_p1
print("error estimate tracks the true error; order 2 removes most of it")
