"""Learning dynamics from end-point observations: gradients against finite differences
of an independent forward solve, the MLP's derivative tensors, and training."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import invimbed
from invimbed._learning.endpoint import MLPDynamics, endpoint_loss, fit_endpoint_dynamics

G = 9.81
Q = 1.0


def projectile_data(depths, v0):
    """Exact end points of dz/dt = [v, -g] thrown from h = 0 at t = p_i, seen at t = q."""
    s = Q - np.asarray(depths)[:, None]
    x = np.stack([np.zeros_like(v0), v0], axis=1)
    y = np.stack([v0 * s - 0.5 * G * s ** 2, v0 - G * s + 0 * v0], axis=-1)
    return x, y


def forward_loss(f, w, x, depths, y, observed):
    """The regression loss by brute force: a forward solve_ivp from every (p_i, x_b)."""
    total = 0.0
    for i, p in enumerate(depths):
        for b, xb in enumerate(x):
            if p == Q:
                zq = xb
            else:
                zq = solve_ivp(lambda t, z: np.asarray(f(t, z[None], w))[0], (p, Q), xb,
                               rtol=1e-12, atol=1e-12).y[:, -1]
            total += 0.5 * np.sum((zq[observed] - y[i, b]) ** 2)
    return total / (len(depths) * len(x))


def fd_gradient(fun, w, h=1e-6):
    g = np.zeros_like(w)
    for j in range(w.size):
        e = np.zeros_like(w)
        e[j] = h * max(1.0, abs(w[j]))
        g[j] = (fun(w + e) - fun(w - e)) / (2 * e[j])
    return g


# -- the MLP's derivative tensors ----------------------------------------------------
@pytest.mark.parametrize("kw", [dict(), dict(linear=True, time=True, scale=[2.0, 0.5, 3.0])],
                         ids=["plain", "linear-time-scale"])
def test_mlp_derivative_tensors_are_differences_of_their_parents(kw):
    rng = np.random.default_rng(3)
    N = 3 if "scale" in kw else 2
    mlp = MLPDynamics(N, hidden=4, **kw)
    w = mlp.init_params(seed=1, gain=1.0) + 0.2 * rng.normal(size=mlp.n_params)
    z = rng.normal(size=(3, N))
    t, h = 0.4, 1e-6
    for dz in range(4):
        for dth in (0, 1):
            if dz + dth == 0:
                continue
            got = mlp.derivative(t, z, w, dz, dth)
            if dth:   # d/dw of the dz-th z-derivative
                par = lambda ww: mlp.derivative(t, z, ww, dz, 0)
                want = np.stack([(par(w + h * e) - par(w - h * e)) / (2 * h)
                                 for e in np.eye(mlp.n_params)], axis=-1)
            else:
                par = lambda zz: mlp.derivative(t, zz, w, dz - 1, 0)
                want = np.stack([(par(z + h * e) - par(z - h * e)) / (2 * h)
                                 for e in np.eye(N)], axis=-1)
            np.testing.assert_allclose(got, want, atol=1e-8 * max(1.0, np.abs(want).max()),
                                       err_msg=f"dz={dz}, dth={dth}")


def test_mlp_batched_weights_are_evaluated_row_by_row():
    mlp = MLPDynamics(2, hidden=3, linear=True, time=True)
    rng = np.random.default_rng(0)
    W = np.stack([mlp.init_params(seed=s, gain=1.0) for s in range(3)])
    z = rng.normal(size=(3, 2))
    for dz, dth in [(0, 0), (2, 0), (1, 1), (3, 1)]:
        got = mlp.derivative(0.3, z, W, dz, dth)
        want = np.stack([mlp.derivative(0.3, z[b], W[b], dz, dth) for b in range(3)])
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


# -- gradients ---------------------------------------------------------------------------
def affine_model(t, z, w):
    """f = A z + b with A = [[w0, w1], [w2, w3]], b = [w4, w5]: affine in z, so the jet
    of order 1 is exact (vectorised)."""
    z = np.atleast_2d(z)
    w = np.broadcast_to(w, (z.shape[0], 6))
    A = w[:, :4].reshape(-1, 2, 2)
    return np.einsum("bij,bj->bi", A, z) + w[:, 4:]


def _affine_f_theta(t, z, w):
    out = np.zeros((len(z), 2, 6))
    for i in range(2):
        out[:, i, 2 * i:2 * i + 2] = z
        out[:, i, 4 + i] = 1.0
    return out


def _affine_f_ztheta(t, z, w):
    out = np.zeros((len(z), 2, 2, 6))
    for i in range(2):
        for m in range(2):
            out[:, i, m, 2 * i + m] = 1.0
    return out


AFFINE_DERIVATIVES = {
    "f_z": lambda t, z, w: np.broadcast_to(w, (len(z), 6))[:, :4].reshape(-1, 2, 2).copy(),
    "f_zz": lambda t, z, w: np.zeros((len(z), 2, 2, 2)),
    "f_zzz": lambda t, z, w: np.zeros((len(z), 2, 2, 2, 2)),
    "f_theta": _affine_f_theta,
    "f_ztheta": _affine_f_ztheta,
    "f_zztheta": lambda t, z, w: np.zeros((len(z), 2, 2, 2, 6)),
}
AFFINE = dict(vectorized=True, derivatives=AFFINE_DERIVATIVES)


def test_affine_model_gradient_equals_finite_differences_of_a_forward_solve():
    depths = np.linspace(0.0, 1.0, 5)
    x, y = projectile_data(depths, np.array([6.0, 11.0, 13.9]))
    w = np.array([0.1, 0.8, -0.2, 0.05, 0.3, -7.0])
    out = endpoint_loss(affine_model, w, x, depths, y, q=Q, rtol=1e-11, atol=1e-12, **AFFINE)
    assert out.success and out.n_sweeps == 2          # one per observed component
    obs = [0, 1]
    assert abs(out.loss - forward_loss(affine_model, w, x, depths, y, obs)) < 1e-8 * out.loss
    fd = fd_gradient(lambda ww: forward_loss(affine_model, ww, x, depths, y, obs), w)
    np.testing.assert_allclose(out.grad, fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())


def test_input_adjoint_is_the_regression_coefficient():
    """adjoint[i, b] = grad_x C(Z(p_i, x_b), y_i^b) (eq. (27)), by FD in x."""
    depths = np.array([0.0, 0.5])
    x, y = projectile_data(depths, np.array([8.0]))
    w = np.array([0.1, 0.8, -0.2, 0.05, 0.3, -7.0])
    out = endpoint_loss(affine_model, w, x[0], depths, y[:, 0], q=Q, rtol=1e-11,
                        atol=1e-12, **AFFINE)
    assert out.adjoint.shape == (2, 2) and out.z.shape == (2, 2)
    for i, p in enumerate(depths):
        def C(xx, i=i, p=p):
            zq = solve_ivp(lambda t, z: affine_model(t, z, w)[0], (p, Q), xx, rtol=1e-12,
                           atol=1e-12).y[:, -1]
            return 0.5 * np.sum((zq - y[i, 0]) ** 2)
        np.testing.assert_allclose(out.adjoint[i], fd_gradient(C, x[0].copy()), rtol=1e-6)


def test_mlp_gradient_equals_finite_differences_of_the_imbedded_loss_to_closure_accuracy():
    """For a nonlinear model the jet of order 1 has a truncation error O(s^3): the
    gradient agrees with FD of the exact (forward-solve) loss to that accuracy, and the
    agreement improves with the jet order."""
    mlp = MLPDynamics(2, hidden=3, scale=[10.0, 10.0])
    w = mlp.init_params(seed=2, gain=0.5)
    depths = np.array([0.6, 0.8, 1.0])
    x, y = projectile_data(depths, np.array([5.0, 9.0]))
    y = y[..., :1]                                  # observe the height only
    fd = fd_gradient(lambda ww: forward_loss(mlp, ww, x, depths, y, [0]), w)
    errs = []
    for order in (1, 2):
        out = endpoint_loss(mlp, w, x, depths, y, q=Q, observed=[0], order=order,
                            rtol=1e-11, atol=1e-12)
        assert out.n_sweeps == 1                    # one observed component: one sweep
        errs.append(np.abs(out.grad - fd).max() / np.abs(fd).max())
    assert errs[0] < 1e-5            # measured 1.2e-6
    assert errs[1] < errs[0] / 30    # measured 3.5e-9


def test_missing_observations_are_left_out():
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0, 11.0]))
    w = np.array([0.0, 1.0, 0.0, 0.0, 0.0, -G])     # the true dynamics: zero loss
    y_bad = y.copy()
    y_bad[1, 0, 0] = np.nan
    out = endpoint_loss(affine_model, w, x, depths, y_bad, q=Q, **AFFINE)
    assert out.loss < 1e-12 and np.abs(out.grad).max() < 1e-9


# -- training ----------------------------------------------------------------------------
def test_training_reduces_the_loss_and_recovers_affine_dynamics():
    depths = np.linspace(0.0, 1.0, 5)
    x, y = projectile_data(depths, np.array([5.0, 8.0, 11.0, 14.0]))
    w0 = np.array([0.0, 0.5, 0.0, 0.0, 0.0, 0.0])
    res = fit_endpoint_dynamics(affine_model, w0, x, depths, y, q=Q, optimizer="L-BFGS-B",
                                epochs=40, **AFFINE)
    assert res.history[-1] < 1e-6 * res.history[0]
    np.testing.assert_allclose(res.x, [0.0, 1.0, 0.0, 0.0, 0.0, -G], atol=1e-2)
    x_new = np.array([[0.0, 13.9]])
    pred = invimbed.solve_imbedding(res.problem, x_new, [0.0], control=res.control).z
    np.testing.assert_allclose(pred[0, 0], [13.9 - G / 2, 13.9 - G], atol=2e-3)


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.05), ("gd", 1e-4)])
def test_first_order_optimizers_reduce_the_loss(optimizer, lr):
    mlp = MLPDynamics(2, hidden=4, scale=[10.0, 10.0])
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0, 12.0]))
    seen = []
    res = fit_endpoint_dynamics(mlp, mlp.init_params(seed=0), x, depths, y[..., :1], q=Q,
                                observed=[0], optimizer=optimizer, learning_rate=lr,
                                epochs=8, callback=lambda info: seen.append(info.loss))
    assert len(seen) == 8 and res.history.size == 9 and res.nit == 8
    assert res.history[-1] < res.history[0]
    assert res.n_sweeps == 9                       # one sweep per epoch, one final


def test_callback_stops_training():
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0]))
    res = fit_endpoint_dynamics(affine_model, np.zeros(6), x, depths, y, q=Q, epochs=50,
                                callback=lambda info: info.epoch >= 3, **AFFINE)
    assert res.nit == 3 and res.status == 99 and not res.success


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(y=np.zeros((2, 1, 2))), ValueError, "`y` must have shape"),
    (dict(observed=[2]), ValueError, "`observed`"),
    (dict(observed=[0, 0]), ValueError, "`observed`"),
    (dict(optimizer="sgd"), ValueError, "`optimizer`"),
    (dict(epochs=-1), ValueError, "`epochs`"),
    (dict(learning_rate=0.0), ValueError, "`learning_rate`"),
    (dict(derivatives={"T_z": lambda z: z}), ValueError, "`derivatives`"),
    (dict(w0=np.zeros((2, 3))), ValueError, "`w0`"),
    (dict(dynamics=3), TypeError, "`dynamics`"),
])
def test_bad_input_names_the_argument(kwargs, exc, match):
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0]))
    args = dict(dynamics=affine_model, w0=np.zeros(6), x=x, depths=depths, y=y)
    args.update(kwargs)
    args.setdefault("epochs", 1)
    with pytest.raises(exc, match=match):
        fit_endpoint_dynamics(args.pop("dynamics"), args.pop("w0"), args.pop("x"),
                              args.pop("depths"), args.pop("y"), q=Q, vectorized=True,
                              **args)
