"""The paper's discrete architecture (section 3.1): method="disc" must follow
eqs. (14) and (15) layer by layer, and converge to the continuous sweep."""

import numpy as np
import pytest

from invimbed import BolzaProblem, Constant, solve_imbedding

C_RUN = 0.3  # running-loss weight


def f(t, z, th):
    return np.array([z[1], -np.sin(z[0]) + th[0] * (1 + 0.5 * t)])


def f_z(z):
    return np.array([[0.0, 1.0], [-np.cos(z[0]), 0.0]])


def f_zz(z):
    out = np.zeros((2, 2, 2))
    out[1, 0, 0] = np.sin(z[0])
    return out


def R(t, z, th):
    return 0.5 * C_RUN * (z[0] ** 2 + th[0] ** 2)


def T(z):
    return np.cos(z[0]) + 0.5 * z[1] ** 2


def T_z(z):
    return np.array([-np.sin(z[0]), z[1]])


def T_zz(z):
    return np.array([[-np.cos(z[0]), 0.0], [0.0, 1.0]])


def hand_recursion(x, w, depths_desc, crop=False):
    """Eqs. (14) and (15) written out by hand, with h = p_i - p_{i+1}."""
    N = 2
    Z, DZ = x.copy(), np.eye(N)
    V, Lam, H = T(x), T_z(x), T_zz(x)
    W, DW, HW = np.zeros(1), np.zeros((1, N)), np.zeros((1, N, N))
    out = {}
    p_prev = 0.0
    for p in depths_desc:
        if p == p_prev:
            out[p] = (Z.copy(), V, Lam.copy(), W.copy())
            continue
        h = p - p_prev
        th = np.array([w])
        Phi, A = f(p, x, th), f_z(x)
        G = np.array([[0.0], [1 + 0.5 * p]])          # d f / d w
        r = np.array([C_RUN * x[0], 0.0])              # grad_z R
        Q = np.diag([C_RUN, 0.0])                      # grad_z^2 R
        rw = np.array([C_RUN * w])                     # grad_w R
        # eq. (14): z(q; p_i) = z(q; p_{i+1}) - h grad z(q; p_{i+1}) . Phi(p_i)
        Z_new = Z - h * DZ @ Phi
        DZ_new = DZ - h * (A if crop else DZ @ A)      # crop: eq. (21)
        # Hessian of V (grad Lam), then eq. (15) with grad Lam at p_i
        H_new = H - h * (H @ A + A.T @ H + np.einsum("i,ijk->jk", Lam, f_zz(x)) + Q)
        Lam_new = Lam - h * (H_new @ Phi + A.T @ Lam + r)
        V_new = V - h * (Lam @ Phi + R(p, x, th))
        # Lam_w = grad_w V is carried to the degree of V (Hessian HW); here f_zw = 0 and
        # the degree-2 source needs grad^2 Lam, beyond the jet: the transport alone remains
        HW_new = HW - h * (HW @ A + A.T @ HW + np.einsum("wi,ijk->wjk", DW, f_zz(x)))
        DW_new = DW - h * (DW @ A + HW @ Phi + G.T @ H)
        W_new = W - h * (DW_new @ Phi + G.T @ Lam + rw)  # grad Lam_w at p_i, as in (15)
        Z, DZ, V, Lam, H, W, DW, HW = Z_new, DZ_new, V_new, Lam_new, H_new, W_new, DW_new, HW_new
        out[p] = (Z.copy(), V, Lam.copy(), W.copy())
        p_prev = p
    return out


def problem(exact=True):
    derivs = {"f_z": lambda t, z, th: f_z(z), "f_zz": lambda t, z, th: f_zz(z),
              "f_theta": lambda t, z, th: np.array([[0.0], [1 + 0.5 * t]]),
              "f_ztheta": lambda t, z, th: np.zeros((2, 2, 1)),
              "R_z": lambda t, z, th: np.array([C_RUN * z[0], 0.0]),
              "R_zz": lambda t, z, th: np.diag([C_RUN, 0.0]),
              "R_theta": lambda t, z, th: np.array([C_RUN * th[0]]),
              "R_ztheta": lambda t, z, th: np.zeros((2, 1)),
              "T_z": T_z, "T_zz": T_zz} if exact else None
    return BolzaProblem(f, R, T, derivatives=derivs)


@pytest.mark.parametrize("closure", ["jet", "crop"])
@pytest.mark.parametrize("depths", [np.arange(0.0, -4.5, -1.0),            # unit layers
                                    np.array([-0.1, -0.35, -0.4, -1.3])])  # given layers
def test_disc_matches_paper_equations_layer_by_layer(closure, depths):
    x, w = np.array([0.7, -0.2]), 0.4
    res = solve_imbedding(problem(), x, depths, control=Constant([w]), closure=closure,
                          method="disc")
    assert res.success
    ref = hand_recursion(x, w, np.sort(depths)[::-1], crop=(closure == "crop"))
    for i, p in enumerate(depths):
        Z, V, Lam, W = ref[p]
        # both sides evaluate the same formulas in a different order: rounding only
        np.testing.assert_allclose(res.z[i], Z, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(res.value[i], V, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(res.adjoint[i], Lam, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(res.param_grad[i], W, rtol=1e-12, atol=1e-12)


def test_disc_is_first_order_and_converges_to_the_sweep():
    """Refining the layers, the discrete recursion tends to the continuous jet-1 sweep
    with error O(h) (slope 1 within 0.2)."""
    x, w = np.array([0.7, -0.2]), 0.4
    pb = problem()
    ref = solve_imbedding(pb, x, [-1.0], control=Constant([w]), rtol=1e-11, atol=1e-13,
                          estimate_error=False)
    errs, hs = [], []
    for n in (10, 20, 40, 80):
        res = solve_imbedding(pb, x, np.linspace(0, -1, n + 1), control=Constant([w]),
                              method="disc")
        errs.append(abs(res.value[-1] - ref.value[0]) + np.abs(res.adjoint[-1] - ref.adjoint[0]).max())
        hs.append(1.0 / n)
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert 0.8 <= slope <= 1.2, (slope, errs)
