"""Learning dynamics from end-point observations: gradients against finite differences
of an independent forward solve, the MLP's derivative tensors, and training."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import OptimizeWarning

import invimbed
from invimbed._learning.model import MLPDynamics
from invimbed._learning.regression import endpoint_loss
from invimbed._learning.training import adam_step, fit_endpoint_dynamics

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
    assert res.nit == 3 and res.status == -4 and not res.success


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


# -- the MLP against an independent reference ---------------------------------------------
def test_mlp_tensors_equal_sympy_derivatives_of_the_documented_formula():
    """Every tensor, f itself included, against sympy's derivatives of
    f = L z + W2 tanh(W1 (z / scale) + c t + b1) + b2, built from the docstring's
    packing of w (W1, b1, c, W2, b2, L, row-major). The difference test above checks each
    tensor against its parent only; this one also catches a wrong forward formula (e.g.
    the scaling) and a wrong tanh derivative shared by a tensor and its parent."""
    sp = pytest.importorskip("sympy")
    N, H = 2, 2
    scale = [2.0, 0.5]
    mlp = MLPDynamics(N, hidden=H, linear=True, time=True, scale=scale)
    t = sp.Symbol("t")
    zs = sp.symbols(f"z0:{N}")
    ws = sp.symbols(f"w0:{mlp.n_params}")
    it = iter(ws)

    def block(rows, cols):
        return sp.Matrix([[next(it) for _ in range(cols)] for _ in range(rows)])

    W1, b1, c, W2, b2, L = block(H, N), block(H, 1), block(H, 1), block(N, H), block(N, 1), \
        block(N, N)
    z = sp.Matrix(zs)
    a = W1 * sp.Matrix([zs[j] / scale[j] for j in range(N)]) + c * t + b1
    f = L * z + W2 * a.applyfunc(sp.tanh) + b2
    rng = np.random.default_rng(5)
    w = rng.normal(size=mlp.n_params)
    z0, t0 = rng.normal(size=N), 0.7
    diffs = {}

    def d(idx, k=None):
        """d/dz_idx[1] ... d/dz_idx[-1] (then d/dw_k) of f[idx[0]], each derivative
        taken once from its parent."""
        if (idx, k) not in diffs:
            if k is not None:
                diffs[idx, k] = sp.diff(d(idx), ws[k])
            elif len(idx) == 1:
                diffs[idx, k] = f[idx[0]]
            else:
                diffs[idx, k] = sp.diff(d(idx[:-1]), zs[idx[-1]])
        return diffs[idx, k]

    requests, exprs = [], []
    for dz in range(4):
        for dth in (0, 1):
            shape = (N,) + (N,) * dz + ((mlp.n_params,) if dth else ())
            requests.append((dz, dth, shape, len(exprs)))
            exprs += [d(idx[:1 + dz], idx[-1] if dth else None) for idx in np.ndindex(*shape)]
    values = np.array(sp.lambdify((t, zs, ws), exprs, "numpy", cse=True)(t0, z0, w),
                      dtype=float)
    for dz, dth, shape, start in requests:
        want = values[start:start + int(np.prod(shape))].reshape(shape)
        got = mlp.derivative(t0, z0, w, dz, dth)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13,
                                   err_msg=f"dz={dz}, dth={dth}")


# -- the optimisers ------------------------------------------------------------------------
def test_adam_step_matches_torch_adam():
    """`adam_step` is Kingma & Ba's Algorithm 1, as torch.optim.Adam implements it."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w = rng.normal(size=5)
    p = torch.tensor(w.copy(), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([p], lr=0.05, betas=(0.8, 0.99), eps=1e-7)
    m = v = np.zeros(5)
    for k in range(1, 6):
        g = np.sin(3 * w) + w ** 2                 # any gradient sequence
        w, m, v = adam_step(w, g, m, v, k, 0.05, beta1=0.8, beta2=0.99, eps=1e-7)
        p.grad = torch.tensor(np.sin(3 * p.detach().numpy()) + p.detach().numpy() ** 2)
        opt.step()
        np.testing.assert_allclose(w, p.detach().numpy(), rtol=1e-13, atol=1e-15)


def test_adam_options_reach_the_update():
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0]))
    common = dict(q=Q, epochs=3, learning_rate=0.1, **AFFINE)
    a = fit_endpoint_dynamics(affine_model, np.zeros(6), x, depths, y, **common)
    b = fit_endpoint_dynamics(affine_model, np.zeros(6), x, depths, y,
                              options={"beta1": 0.0}, **common)
    c = fit_endpoint_dynamics(affine_model, np.zeros(6), x, depths, y,
                              options={"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}, **common)
    assert not np.allclose(a.x, b.x)
    np.testing.assert_array_equal(a.x, c.x)        # the defaults, spelt out



def test_options_of_another_optimizer_are_ignored_with_a_warning():
    """As scipy.optimize.minimize does, so that one dict can serve several optimisers."""
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0]))
    common = dict(q=Q, epochs=2, learning_rate=0.1, **AFFINE)
    plain = fit_endpoint_dynamics(affine_model, np.zeros(6), x, depths, y, **common)
    with pytest.warns(OptimizeWarning, match=r"'ftol' are not used by optimizer='adam'"):
        res = fit_endpoint_dynamics(affine_model, np.zeros(6), x, depths, y,
                                    options={"ftol": 1e-14, "beta1": 0.9}, **common)
    np.testing.assert_array_equal(res.x, plain.x)

def test_lbfgsb_history_starts_at_the_initial_loss_and_reuses_the_last_sweep():
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0, 11.0]))
    w0 = np.array([0.0, 0.5, 0.0, 0.0, 0.0, 0.0])
    start = endpoint_loss(affine_model, w0, x, depths, y, q=Q, **AFFINE)
    seen = []
    res = fit_endpoint_dynamics(affine_model, w0, x, depths, y, q=Q, optimizer="L-BFGS-B",
                                epochs=5, callback=lambda info: seen.append(info), **AFFINE)
    assert res.history.size == res.nit + 1 and res.history[0] == start.loss
    assert res.fun == res.history[-1]
    for info in seen:                      # loss and grad are those at info.w
        assert info.loss == res.history[info.epoch]
        at = endpoint_loss(affine_model, info.w, x, depths, y, q=Q, **AFFINE)
        np.testing.assert_allclose(at.grad, info.grad, rtol=1e-12, atol=1e-12)
    # every sweep is an evaluation of L-BFGS-B (2 observed components per evaluation)
    assert res.n_sweeps % 2 == 0


def test_callback_stops_lbfgsb():
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0]))
    res = fit_endpoint_dynamics(affine_model, np.zeros(6), x, depths, y, q=Q, epochs=50,
                                optimizer="L-BFGS-B", callback=lambda info: info.epoch >= 2,
                                **AFFINE)
    assert res.nit == 2 and res.status == -4 and not res.success
    assert res.history.size == 3 and "callback" in res.message


def test_adam_callback_sees_the_loss_at_the_new_weights():
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0]))
    seen = []
    res = fit_endpoint_dynamics(affine_model, np.zeros(6), x, depths, y, q=Q, epochs=4,
                                callback=seen.append, **AFFINE)
    assert [s.epoch for s in seen] == [1, 2, 3, 4]
    np.testing.assert_array_equal([s.loss for s in seen], res.history[1:])
    np.testing.assert_array_equal(seen[-1].w, res.x)


def test_gtol_stops_at_a_stationary_point():
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0, 11.0]))
    w_true = np.array([0.0, 1.0, 0.0, 0.0, 0.0, -G])
    res = fit_endpoint_dynamics(affine_model, w_true, x, depths, y, q=Q, gtol=1e-6,
                                epochs=10, **AFFINE)
    assert res.nit == 0 and res.success and "gtol" in res.message
    np.testing.assert_array_equal(res.x, w_true)



@pytest.mark.parametrize("optimizer", ["adam", "L-BFGS-B"])
def test_a_failed_sweep_ends_training_with_the_last_good_weights(optimizer):
    """Dynamics that are NaN for w > 0.6: the data want w = 0.5, Adam overshoots."""
    def f(t, z, w):
        return (np.nan if w[0] > 0.6 else w[0]) * z
    depths = np.array([-1.0, -0.5])
    y = np.exp(0.5 * -depths)[:, None]
    res = fit_endpoint_dynamics(f, [0.0], [1.0], depths, y, optimizer=optimizer,
                                learning_rate=0.1, epochs=30)
    assert res.status == -1 and not res.success and np.isnan(res.fun)
    assert res.message.startswith("A sweep failed") and "non-finite" in res.message
    assert np.all(np.isfinite(res.x)) and res.x[0] <= 0.6
    assert res.history.size == res.nit + 1

# -- user mistakes: each names the argument ----------------------------------------------
def _fit(**kwargs):
    depths = np.linspace(0.0, 1.0, 3)
    x, y = projectile_data(depths, np.array([6.0]))
    args = dict(dynamics=affine_model, w0=np.zeros(6), x=x, depths=depths, y=y, q=Q,
                epochs=1, vectorized=True)
    args.update(kwargs)
    return fit_endpoint_dynamics(args.pop("dynamics"), args.pop("w0"), args.pop("x"),
                                 args.pop("depths"), args.pop("y"), **args)


def _with_nan(a, index):
    a = np.array(a, dtype=float)
    a[index] = np.nan
    return a


_X, _Y = projectile_data(np.linspace(0.0, 1.0, 3), np.array([6.0]))
_MLP = MLPDynamics(2, hidden=3)


@pytest.mark.parametrize("kwargs, exc, match", [
    # data
    (dict(x=_with_nan(_X, (0, 1))), ValueError, r"`x` must be finite"),
    (dict(x=_X + 1j), TypeError, r"`x` must be real"),
    (dict(x="0, 6"), TypeError, r"`x` must be array_like"),
    (dict(y=np.full_like(_Y, np.inf)), ValueError, r"`y` must be finite or NaN"),
    (dict(y=np.full_like(_Y, np.nan)), ValueError, r"`y` must hold at least one"),
    (dict(y=_Y.astype(complex)), TypeError, r"`y` must be real"),
    (dict(y=[["a"]]), TypeError, r"`y` must be array_like"),
    (dict(depths=[0.0, 0.5, 2.0]), ValueError, r"`depths`.*<= q"),
    (dict(depths=[0.0, np.nan, 1.0]), ValueError, r"`depths` must be finite"),
    (dict(depths=[0.0, 1.0, 0.5]), ValueError, r"`depths` must be strictly monotone"),
    (dict(q="1"), TypeError, r"`q` must be a real number"),
    (dict(q=np.nan), ValueError, r"`q` must be a finite number"),
    (dict(observed=[0.5]), TypeError, r"`observed` must be a sequence of int"),
    (dict(observed="0"), TypeError, r"`observed` must be a sequence of int"),
    (dict(observed=[-1]), ValueError, r"`observed` must list distinct"),
    (dict(observed=[]), ValueError, r"`observed` must list distinct"),
    # weights
    (dict(w0=_with_nan(np.zeros(6), 2)), ValueError, r"`w0` must be finite"),
    (dict(w0=[]), ValueError, r"`w0` must be non-empty"),
    (dict(w0="zeros"), TypeError, r"`w0` must be array_like"),
    (dict(dynamics=_MLP, w0=np.zeros(_MLP.n_params - 1), vectorized=None), ValueError,
     r"`w0` must be of size n_params = 17"),
    (dict(dynamics=_MLP, w0=np.zeros(_MLP.n_params), x=np.zeros((1, 3)), vectorized=None),
     ValueError, r"`x` must have last dimension N = 2"),
    # the model and its derivatives
    (dict(derivatives=[("f_z", None)]), TypeError, r"`derivatives` must be a dict"),
    (dict(vectorized="no"), TypeError, r"`vectorized` must be True or False"),
    # the optimiser
    (dict(optimizer=3), TypeError, r"`optimizer` must be a string"),
    (dict(optimizer="Adam"), ValueError, r"`optimizer` must be one of 'adam', 'gd'"),
    (dict(epochs=2.0), TypeError, r"`epochs` must be an integer"),
    (dict(epochs=True), TypeError, r"`epochs` must be an integer"),
    (dict(learning_rate="0.1"), TypeError, r"`learning_rate` must be a real number"),
    (dict(learning_rate=np.nan), ValueError, r"`learning_rate` must be a finite"),
    (dict(learning_rate=-1.0), ValueError, r"`learning_rate` must be a positive"),
    (dict(gtol=-1.0), ValueError, r"`gtol` must be a non-negative"),
    (dict(gtol="0"), TypeError, r"`gtol` must be a real number"),
    (dict(options=[("beta1", 0.9)]), TypeError, r"`options` must be a dict"),
    (dict(options={"betas": (0.9, 0.99)}), TypeError,
     r"`options` for optimizer='adam'.*'betas' \(did you mean 'beta"),
    (dict(options={"beta1": 1.0}), ValueError, r"`options\['beta1'\]` must be in \[0, 1\)"),
    (dict(options={"eps": 0.0}), ValueError, r"`options\['eps'\]` must be a positive"),
    (dict(optimizer="gd", options={"beta": 0.9}), TypeError,
     r"`options` for optimizer='gd' must use only no options, but got 'beta' \(did you"),
    (dict(optimizer="L-BFGS-B", options={"maxiter": 5}), TypeError,
     r"`options` must not set 'maxiter': pass `epochs`"),
    (dict(optimizer="L-BFGS-B", options={"ftoll": 1e-9}), TypeError,
     r"'ftoll' \(did you mean 'ftol'\?\)"),
    (dict(callback="print"), TypeError, r"`callback` must be callable"),
    (dict(progress="yes"), TypeError, r"`progress` must be True or False"),
    # keywords passed on to solve_imbedding
    (dict(rtoll=1e-6), TypeError, r"fit_endpoint_dynamics\(\).*'rtoll' \(did you mean 'rtol'"),
    (dict(control=None), TypeError, r"`control` is set by the regression"),
])
def test_user_mistakes_name_the_argument(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        _fit(**kwargs)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(w=_with_nan(np.zeros(6), 0)), ValueError, r"`w` must be finite"),
    (dict(w=np.zeros((6, 1))), ValueError, r"`w` must be a 1-D array"),
    (dict(atoll=1e-9), TypeError, r"endpoint_loss\(\).*'atoll' \(did you mean 'atol'"),
    (dict(epochs=3), TypeError, r"endpoint_loss\(\).*'epochs'"),
    (dict(y=_Y[:2]), ValueError, r"`y` must have shape"),
])
def test_endpoint_loss_mistakes_name_the_argument(kwargs, exc, match):
    args = dict(w=np.zeros(6), y=_Y)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        endpoint_loss(affine_model, args.pop("w"), _X, np.linspace(0.0, 1.0, 3),
                      args.pop("y"), q=Q, **AFFINE, **args)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: MLPDynamics(2.0), TypeError, r"`n_state` must be an integer"),
    (lambda: MLPDynamics(0), ValueError, r"`n_state` must be an integer >= 1"),
    (lambda: MLPDynamics(2, hidden=True), TypeError, r"`hidden` must be an integer"),
    (lambda: MLPDynamics(2, hidden=0), ValueError, r"`hidden` must be an integer >= 1"),
    (lambda: MLPDynamics(2, linear="no"), TypeError, r"`linear` must be True or False"),
    (lambda: MLPDynamics(2, time=1), TypeError, r"`time` must be True or False"),
    (lambda: MLPDynamics(2, scale=[1.0, 2.0, 3.0]), ValueError, r"`scale` must be a number "
                                                                r"or have shape \(2,\)"),
    (lambda: MLPDynamics(2, scale=[1.0, np.nan]), ValueError, r"`scale` must be finite"),
    (lambda: MLPDynamics(2, scale=[1.0, -1.0]), ValueError, r"`scale` must be positive"),
    (lambda: MLPDynamics(2, scale="big"), TypeError, r"`scale` must be array_like"),
    (lambda: _MLP.init_params(seed="a"), TypeError, r"`seed` must be None"),
    (lambda: _MLP.init_params(seed=0, gain=-1.0), ValueError, r"`gain` must be a non-neg"),
    (lambda: _MLP.unpack(np.zeros(3)), ValueError, r"`w` must have shape \(n_params,\)"),
    (lambda: _MLP(0.0, np.zeros((4, 3)), np.zeros(17)), ValueError,
     r"`z` must have shape \(N,\) or \(B, N\) with N = n_state = 2"),
    (lambda: _MLP.derivative(0.0, np.zeros(2), np.zeros(17), 4, 0), ValueError,
     r"`dz` must be <= 3"),
    (lambda: _MLP.derivative(0.0, np.zeros(2), np.zeros(17), 1.0, 0), TypeError,
     r"`dz` must be an integer"),
])
def test_mlp_mistakes_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
