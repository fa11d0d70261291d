"""The PyTorch adapter (invimbed.nn): eq. (14) with the "exact", "jet" and "crop"
nested Jacobians, checked against the numpy core's method="disc" (same recursions), and
the imbedded adjoint of Theorem 2 (eqs. (15), (32)) against autograd."""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from invimbed.nn import MLP, InImNet, imbedded_adjoint  # noqa: E402

D64 = torch.float64

# torch's first forward-mode AD call loads decompositions through torch.jit.script
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Small tensors: one thread is fastest, and immune to a busy machine (some fused
    kernels spin-wait for their threads)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def make_net(dim=3, seed=0, **kw):
    torch.manual_seed(seed)
    return InImNet(dim, **kw).double()


def grads(net, x, loss):
    """Autograd gradients of ``loss(outputs)`` in ``x`` and in every parameter."""
    x = x.detach().clone().requires_grad_(True)
    net.zero_grad()
    loss(net(x)).backward()
    return x.grad.clone(), [p.grad.clone() for p in net.parameters()]


class Affine(torch.nn.Module):
    """Phi(x) = A x + c, fixed."""

    def __init__(self, A, c):
        super().__init__()
        self.A, self.c = torch.nn.Parameter(A), torch.nn.Parameter(c)

    def forward(self, x):
        return x @ self.A.T + self.c


class TanhLayer(torch.nn.Module):
    """Phi(p, x) = (1 + 0.3 p) tanh(W x + b), W and b shared by every layer: the same
    function as the sympy problem below."""

    def __init__(self, W, b, p):
        super().__init__()
        self.W, self.b, self.c = W, b, 1.0 + 0.3 * p

    def forward(self, x):
        return self.c * torch.tanh(x @ self.W.T + self.b)


class Conv(torch.nn.Module):
    """A convolutional Phi on flattened 4 x 32 x 32 images (dim 4096)."""

    def __init__(self, bn=False):
        super().__init__()
        mods = [torch.nn.Conv2d(4, 8, 3, padding=1)]
        mods += [torch.nn.BatchNorm2d(8)] if bn else []
        mods += [torch.nn.Tanh(), torch.nn.Conv2d(8, 4, 3, padding=1)]
        self.net = torch.nn.Sequential(*mods)

    def forward(self, x):
        return self.net(x.reshape(-1, 4, 32, 32)).reshape(x.shape[0], -1)


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation returns
    (physical sizes: under vmap the batch of tangents is included)."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(o, torch.Tensor):
                self.numel = max(self.numel, o.numel())
        return out


# -- construction, shapes, one pass ---------------------------------------------------------
def test_depth_grid_and_shapes():
    net = InImNet(3)
    assert net.depths.tolist() == [0.0, -1.0, -2.0, -3.0, -4.0]
    assert len(net.phis) == 4 and isinstance(net.phis[0], MLP)
    x = torch.randn(5, 3)
    out = net(x)
    assert out.shape == (5, 5, 3)
    torch.testing.assert_close(out[0], x)                 # Z(0, x) = x
    # largest steps not exceeding `step` that divide the interval evenly
    grid = InImNet(2, p_min=-1.0, step=0.3).depths.tolist()
    assert grid == pytest.approx([0, -0.25, -0.5, -0.75, -1])
    assert InImNet(2, p_min=-2, step=0.5).n_layers == 4
    given = InImNet(2, depths=[0.0, -0.1, -0.35, -1.3])
    assert given.depths.tolist() == pytest.approx([0.0, -0.1, -0.35, -1.3])
    assert given(torch.randn(1, 2)).shape == (4, 1, 2)


def test_default_phi_is_the_papers_mlp():
    """n linear layers, hidden width inflation * dim, dropout after every layer but the
    last (appendix AppendixHyperparameters)."""
    net = InImNet(20, p_min=-1, hidden_layers=3, inflation=2, dropout=0.3)
    kinds = [type(m).__name__ for m in net.phis[0].net]
    assert kinds == ["Linear", "Tanh", "Dropout", "Linear", "Tanh", "Dropout", "Linear"]
    linear = [m for m in net.phis[0].net if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in linear] == [40, 40, 20]
    kinds = [type(m).__name__ for m in InImNet(4, p_min=-1, activation="relu").phis[0].net]
    assert kinds == ["Linear", "ReLU", "Linear"]


@pytest.mark.parametrize("closure", ["exact", "crop", "jet"])
def test_every_depth_from_one_pass(closure):
    """Each layer's Phi is evaluated once per forward, whatever the number of depths, and
    the output at p_i is the depth-p_i network's: a shallower model built from the same
    layers gives the same outputs."""
    net = make_net(3, depths=[0, -1, -1.5, -3], closure=closure)
    calls = []
    for i, m in enumerate(net.phis):
        m.register_forward_hook(lambda mod, inp, out, i=i: calls.append(i))
    x = torch.randn(4, 3, dtype=D64)
    out = net(x)
    assert sorted(calls) == [0, 1, 2]
    layers = list(net.phis)
    shallow = InImNet(3, depths=[0, -1, -1.5], closure=closure, phi=lambda i: layers[i])
    torch.testing.assert_close(shallow(x), out[:3], rtol=0, atol=1e-14)


# -- the same recursions as the numpy core ---------------------------------------------------
DEPTHS = np.array([0.0, -0.35, -0.5, -1.2])          # given (unequal) layers, L = 3
W0 = np.array([[0.9, -0.6], [0.4, 0.7]])
B0 = np.array([0.2, -0.5])
G = np.array([0.7, -1.3])                             # the linear terminal loss T = <G, z>
X = np.array([[0.3, -0.4], [0.9, 0.2]])


@pytest.fixture(scope="module")
def core():
    """solve_imbedding(method="disc") on dz/dt = (1 + 0.3 t) tanh(W z + b), w = (W, b)."""
    sp = pytest.importorskip("sympy")
    import invimbed

    t, z, th = sp.Symbol("t"), sp.symbols("z0 z1"), sp.symbols("w0:6")
    pre = sp.Matrix(2, 2, th[:4]) * sp.Matrix(z) + sp.Matrix(th[4:])
    f = [(1 + sp.Rational(3, 10) * t) * sp.tanh(pre[i]) for i in range(2)]
    pb = invimbed.from_sympy(t, list(z), list(th), f, terminal_loss=G[0] * z[0] + G[1] * z[1])
    w = invimbed.Constant(np.concatenate([W0.ravel(), B0]))
    run = {}
    for name, closure, order in [("jet", "jet", 1), ("crop", "crop", 1), ("exact", "jet", 3)]:
        # order 3 >= L: every Taylor coefficient the 3 layers reach is carried, so the
        # core's jet is the untruncated discrete recursion
        run[name] = invimbed.solve_imbedding(pb, X, DEPTHS, control=w, closure=closure,
                                             order=order, method="disc", estimate_error=False)
        assert run[name].success
    return run


def tanh_net(closure, **kw):
    W = torch.nn.Parameter(torch.tensor(W0))
    b = torch.nn.Parameter(torch.tensor(B0))
    return InImNet(2, depths=DEPTHS, closure=closure,
                   phi=lambda i: TanhLayer(W, b, DEPTHS[i + 1]), **kw)


@pytest.mark.parametrize("materialize", [False, True])
@pytest.mark.parametrize("closure", ["exact", "crop", "jet"])
def test_outputs_match_numpy_core(core, closure, materialize):
    out = tanh_net(closure, materialize=materialize)(torch.tensor(X))
    np.testing.assert_allclose(out.detach().numpy(), core[closure].z, rtol=0, atol=1e-10)


def test_paper_form_adjoint_matches_numpy_core(core):
    """imbedded_adjoint(form="paper") is the core's (15), with grad Lam "updated
    first": Lam and Lam_w of every depth agree."""
    net = tanh_net("exact")
    lam, pg = imbedded_adjoint(net, torch.tensor(X), torch.tensor(G).expand(2, 2), form="paper")
    np.testing.assert_allclose(lam.numpy(), core["exact"].adjoint, rtol=0, atol=1e-10)
    ours = torch.cat([pg["phis.0.W"].reshape(4, -1), pg["phis.0.b"]], 1).numpy()
    np.testing.assert_allclose(ours, core["exact"].param_grad.sum(axis=1), rtol=0, atol=1e-10)


def test_discrete_form_is_the_gradient_and_paper_form_differs_by_h2():
    """form="discrete" is the exact gradient of the outputs (grad Lam at p_{i-1}); the
    printed eq. (15) differs from it by O(h^2) per layer (slope 2 within 0.3)."""
    errs, hs = [], []
    for s in (0.4, 0.2, 0.1, 0.05):
        depths = s * np.array([0.0, -1, -2, -3])
        W = torch.nn.Parameter(torch.tensor(W0))
        b = torch.nn.Parameter(torch.tensor(B0))
        net = InImNet(2, depths=depths, phi=lambda i: TanhLayer(W, b, depths[i + 1]))
        x, g = torch.tensor(X), torch.tensor(G).expand(2, 2)
        lam, _ = imbedded_adjoint(net, x, g)
        gx = [torch.func.vjp(lambda xx: net(xx)[i], x)[1](g)[0] for i in range(4)]
        torch.testing.assert_close(lam, torch.stack(gx), rtol=0, atol=1e-12)
        paper, _ = imbedded_adjoint(net, x, g, form="paper")
        errs.append((paper - lam).abs().max().item())
        hs.append(s)
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert abs(slope - 2) < 0.3, (slope, errs)


# -- what distinguishes the three Jacobians (as documented) ----------------------------------
def test_one_or_two_layers_all_jacobians_coincide():
    x = torch.randn(3, 3, dtype=D64)
    outs = [make_net(3, p_min=-2, closure=j)(x) for j in ("exact", "crop", "jet")]
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-14)
    torch.testing.assert_close(outs[2], outs[0], rtol=0, atol=1e-14)


def test_affine_phi_jet_exact_crop_not():
    """Affine Phi: Z is affine in x and the jet's product of Jacobians is exact; crop
    drops the products h_i h_j grad Phi_i grad Phi_j."""
    torch.manual_seed(1)
    mods = [Affine(0.5 * torch.randn(3, 3, dtype=D64), torch.randn(3, dtype=D64)) for _ in range(4)]
    x = torch.randn(2, 3, dtype=D64)
    out = {j: InImNet(3, p_min=-4, closure=j, phi=lambda i: mods[i])(x)
           for j in ("exact", "jet", "crop")}
    torch.testing.assert_close(out["jet"], out["exact"], rtol=0, atol=1e-12)
    assert (out["crop"] - out["exact"]).abs().max() > 1e-2
    # and the exact network is the composition of the layers' Euler steps, expanded
    A = [m.A.detach() for m in mods]
    c = [m.c.detach() for m in mods]
    Z, J = x.clone(), torch.eye(3, dtype=D64)      # Z_k(x) = Z_{k-1}(x) + J_{k-1} Phi_k(x)
    for k in range(4):
        Z = Z + (x @ A[k].T + c[k]) @ J.T
        J = J + J @ A[k]
        torch.testing.assert_close(out["exact"][k + 1], Z, rtol=0, atol=1e-12)


def test_truncation_error_is_third_order_in_depth():
    """For a nonlinear Phi, jet and crop err by O(s^3) (docs/theory.md, "The closures", K = 1) at a
    fixed number of layers over a depth s: slope 3 within 0.3."""
    x = torch.randn(2, 3, dtype=D64)
    errs = {"jet": [], "crop": []}
    ss = [0.4, 0.2, 0.1, 0.05]
    for s in ss:
        torch.manual_seed(3)
        layers = [MLP(3).double() for _ in range(4)]
        depths = [-s * i for i in range(5)]
        ex = InImNet(3, depths=depths, phi=lambda i: layers[i])(x)
        for j in errs:
            out = InImNet(3, depths=depths, closure=j, phi=lambda i: layers[i])(x)
            errs[j].append((out - ex).abs().max().item())
    for j, e in errs.items():
        slope = np.polyfit(np.log(ss), np.log(e), 1)[0]
        assert abs(slope - 3) < 0.3, (j, slope, e)


# -- backward: autograd and the imbedded adjoint --------------------------------------------
LOSSES = {
    "deepest": lambda out: (out[-1] ** 2).sum(),
    "every depth": lambda out: sum((k + 1) * torch.sin(o).sum() for k, o in enumerate(out)),
}


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("shared", [False, True])
def test_adjoint_equals_autograd(loss, shared):
    x = torch.randn(4, 3, dtype=D64)
    net = make_net(3, p_min=-3, shared=shared)
    gx, gp = grads(net, x, LOSSES[loss])
    net.backward_mode = "adjoint"
    ax, ap = grads(net, x, LOSSES[loss])
    torch.testing.assert_close(ax, gx, rtol=0, atol=1e-8)
    for a, b in zip(ap, gp):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-8)
    # imbedded_adjoint with each depth's cotangent: Lam(p_i, x) summed is the input gradient
    out = net(x).detach().requires_grad_(True)
    LOSSES[loss](out).backward()
    lam, pg = imbedded_adjoint(net, x, out.grad)
    torch.testing.assert_close(lam.sum(0), gx, rtol=0, atol=1e-8)
    for (name, p), b in zip(net.named_parameters(), gp):
        torch.testing.assert_close(pg[name].sum(0), b, rtol=0, atol=1e-8)


def test_imbedded_adjoint_one_cotangent_every_depth():
    """One grad_T for every depth: Lam(p_i, x) = grad_x <g, Z(p_i, x)> for all i at once."""
    net = make_net(2, p_min=-3)
    x, g = torch.randn(3, 2, dtype=D64), torch.randn(3, 2, dtype=D64)
    lam, pg = imbedded_adjoint(net, x, g)
    assert lam.shape == (4, 3, 2) and pg["phis.0.net.0.weight"].shape == (4, 4, 2)
    torch.testing.assert_close(lam[0], g)                       # Lam(q, x) = grad T
    for i in range(4):
        gx, gp = grads(net, x, lambda out: (out[i] * g).sum())
        torch.testing.assert_close(lam[i], gx, rtol=0, atol=1e-10)
        for (name, _), b in zip(net.named_parameters(), gp):
            torch.testing.assert_close(pg[name][i], b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("mode", ["exact/adjoint", "exact/autograd", "crop/autograd",
                                  "jet/autograd", "exact/adjoint/materialize"])
def test_gradcheck(mode):
    closure, backward, *mat = mode.split("/")
    net = make_net(2, p_min=-2 if mat else -3, hidden_layers=2, inflation=1.5,
                   closure=closure, backward=backward, materialize=bool(mat))
    names = [n for n, _ in net.named_parameters()]

    def f(x, *params):
        return torch.func.functional_call(net, dict(zip(names, params)), (x,))

    x = torch.randn(2, 2, dtype=D64, requires_grad=True)
    params = [p.detach().clone().requires_grad_(True) for p in net.parameters()]
    assert torch.autograd.gradcheck(f, (x, *params))


# -- matrix-free ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["exact/autograd", "exact/adjoint", "crop/autograd",
                                  "jet/autograd"])
def test_matrix_free_on_4096_dimensions(mode):
    """A convolutional Phi on 4 x 32 x 32 inputs, batch 2, 2 layers: no tensor of
    dim^2 = 16.8 M elements is formed, forward or backward."""
    closure, backward = mode.split("/")
    torch.manual_seed(0)
    net = InImNet(4096, p_min=-2, closure=closure, backward=backward, phi=lambda i: Conv())
    x = torch.randn(2, 4096)
    with LargestTensor() as seen:
        out = net(x)
        (out[-1] ** 2).mean().backward()
    assert out.shape == (3, 2, 4096)
    assert seen.numel < 4096 ** 2 // 100
    assert all(torch.isfinite(p.grad).all() for p in net.parameters())


def test_materialize_forms_the_jacobian():
    """The detector above does see a materialised Jacobian (B dim^2 elements)."""
    net = make_net(32, p_min=-2, closure="crop", materialize=True)
    with LargestTensor() as seen:
        net(torch.randn(2, 32, dtype=D64))
    assert seen.numel >= 2 * 32 * 32


# -- dropout, eval mode, batch norm, shared Phi ---------------------------------------------
def test_dropout_train_and_eval():
    net = make_net(3, p_min=-2, dropout=0.5)
    x = torch.randn(4, 3, dtype=D64)
    a, b = net(x), net(x)
    assert (a - b).abs().max() > 1e-6                      # fresh masks each forward
    torch.manual_seed(5)
    a = net(x)
    torch.manual_seed(5)
    torch.testing.assert_close(net(x), a)
    # one mask per layer, shared by the value and every Jacobian product: with 2 layers
    # the three Jacobians coincide, and do so under dropout too
    for j in ("crop", "jet"):
        torch.manual_seed(5)
        torch.testing.assert_close(InImNet(3, p_min=-2, closure=j, phi=lambda i: net.phis[i])(x),
                                   a, rtol=0, atol=1e-14)
    net.eval()
    torch.testing.assert_close(net(x), net(x))


def test_dropout_adjoint_replays_the_forward_masks():
    net = make_net(3, p_min=-3, dropout=0.3)
    x = torch.randn(4, 3, dtype=D64)
    torch.manual_seed(7)
    gx, gp = grads(net, x, LOSSES["every depth"])
    net.backward_mode = "adjoint"
    torch.manual_seed(7)
    ax, ap = grads(net, x, LOSSES["every depth"])
    torch.testing.assert_close(ax, gx, rtol=0, atol=1e-8)
    for a, b in zip(ap, gp):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-8)


def nested_differences(phis, hs, x, delta=1e-3):
    """Eq. (14) with every grad Z . v a central difference, nested: an independent
    evaluation of the exact discrete network (error ~ delta^2)."""
    def Z(k, xx):
        if k == 0:
            return xx
        u = phis[k - 1](xx)
        jv = (Z(k - 1, xx + delta * u) - Z(k - 1, xx - delta * u)) / (2 * delta)
        return Z(k - 1, xx) - hs[k - 1] * jv
    with torch.no_grad():
        return torch.stack([Z(k, x) for k in range(len(phis) + 1)])


def finite_difference_gradient(f, x, delta=1e-6):
    out = torch.zeros_like(x)
    with torch.no_grad():
        for idx in np.ndindex(*x.shape):
            e = torch.zeros_like(x)
            e[idx] = delta
            out[idx] = (f(x + e) - f(x - e)) / (2 * delta)
    return out


NORMS = {"batch": lambda: torch.nn.BatchNorm1d(6), "layer": lambda: torch.nn.LayerNorm(6),
         "group": lambda: torch.nn.GroupNorm(2, 6)}


@pytest.mark.parametrize("norm", list(NORMS))
def test_normalisation_layers(norm):
    """Training-mode normalisation couples the samples (batch norm) and torch's fused
    kernels differentiate wrongly twice (pytorch issues 196699, 196700): the sweeps use
    primitive-op versions. Checked: the exact outputs against nested differences, the
    gradients of every mode against finite differences, the adjoint against autograd,
    batch norm's running statistics updated once per layer per forward."""
    torch.manual_seed(0)
    mk = lambda i: torch.nn.Sequential(torch.nn.Linear(3, 6), NORMS[norm](),  # noqa: E731
                                       torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
    net = InImNet(3, p_min=-3, phi=mk)
    x = torch.randn(5, 3, dtype=D64)
    loss = LOSSES["deepest"]
    gx, gp = grads(net, x, loss)
    if norm == "batch":
        assert [int(m[1].num_batches_tracked) for m in net.phis] == [1, 1, 1]
    ref = nested_differences(list(net.phis), net._h, x)
    torch.testing.assert_close(net(x), ref, rtol=0, atol=1e-5)
    net.backward_mode = "adjoint"
    ax, ap = grads(net, x, loss)
    torch.testing.assert_close(ax, gx, rtol=0, atol=1e-8)
    for a, b in zip(ap, gp):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-8)
    net.backward_mode = "autograd"
    for closure in ("exact", "crop", "jet"):
        net.closure = closure
        fd = finite_difference_gradient(lambda xx: loss(net(xx)), x)
        torch.testing.assert_close(grads(net, x, loss)[0], fd, rtol=0, atol=1e-6)
    net.eval()
    assert net(x).shape == (4, 5, 3)


def test_shared_phi_and_extrapolation():
    """shared=True: one Phi for every layer; the state dict does not depend on the depth,
    so a deeper shared model extrapolates the trained one (Appendix F.3)."""
    net = make_net(3, p_min=-2, shared=True, closure="crop")
    assert len(net.phis) == 1
    n_mlp = sum(p.numel() for p in MLP(3).parameters())
    assert sum(p.numel() for p in net.parameters()) == n_mlp
    m = net.phis[0]
    same = InImNet(3, p_min=-2, closure="crop", phi=lambda i: m)
    x = torch.randn(2, 3, dtype=D64)
    torch.testing.assert_close(same(x), net(x))
    deep = InImNet(3, p_min=-5, shared=True, closure="crop").double()
    deep.load_state_dict(net.state_dict())
    out = deep(x)
    assert out.shape == (6, 2, 3)
    torch.testing.assert_close(out[:3], net(x), rtol=0, atol=1e-14)


# -- errors and the optional dependency ------------------------------------------------------
def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="`closure` must be one of"):
        InImNet(3, closure="stencil")
    with pytest.raises(ValueError, match="backward='adjoint' needs closure='exact'"):
        InImNet(3, closure="crop", backward="adjoint")
    with pytest.raises(ValueError, match="`p_min` must be a finite negative"):
        InImNet(3, p_min=1)
    with pytest.raises(ValueError, match="`depths` must be finite and strictly decreasing"):
        InImNet(3, depths=[0, -1, -1])
    with pytest.raises(TypeError, match=r"`phi\(0\)` must return a torch.nn.Module"):
        InImNet(3, phi=lambda i: (lambda x: x))
    net = InImNet(3, p_min=-1, closure="crop")
    with pytest.raises(ValueError, match="backward='adjoint' needs closure='exact'"):
        net.backward_mode = "adjoint"
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, 3\)"):
        net(torch.randn(3))
    with pytest.raises(ValueError, match="must map shape"):
        InImNet(3, p_min=-1, phi=lambda i: torch.nn.Linear(3, 2))(torch.randn(2, 3))
    with pytest.raises(ValueError, match="`grad_T` must be a tensor of shape"):
        imbedded_adjoint(net, torch.randn(2, 3), torch.randn(3, 3))


def test_jacobian_is_a_deprecated_alias_of_closure():
    """``jacobian=`` (and the ``jacobian`` attribute) still work, warn and name ``closure``;
    the model they build is the one ``closure=`` builds, output for output."""
    x = torch.randn(4, 3, dtype=D64)
    for value in ("exact", "crop", "jet"):
        new = make_net(3, p_min=-3, closure=value)
        with pytest.warns(DeprecationWarning, match="use `closure`") as record:
            old = make_net(3, p_min=-3, jacobian=value)
        assert record[0].filename == __file__          # points at the caller
        assert old.closure == new.closure == value
        torch.testing.assert_close(old(x), new(x), rtol=0, atol=0)
    assert make_net(3, p_min=-3).closure == "exact"
    with pytest.raises(TypeError, match="give `closure` only"):
        InImNet(3, closure="crop", jacobian="crop")
    # an error names the keyword the caller used
    with pytest.warns(DeprecationWarning), \
            pytest.raises(ValueError, match="`jacobian` must be one of"):
        InImNet(3, jacobian="stencil")
    with pytest.warns(DeprecationWarning), \
            pytest.raises(ValueError, match="backward='adjoint' needs jacobian='exact'"):
        InImNet(3, jacobian="crop", backward="adjoint")
    net = InImNet(3, p_min=-2)
    with pytest.warns(DeprecationWarning, match="use `closure`"):
        assert net.jacobian == "exact"
    with pytest.warns(DeprecationWarning, match="use `closure`") as record:
        net.jacobian = "jet"
    assert record[0].filename == __file__
    assert net.closure == "jet" and "closure='jet'" in repr(net)
    net.closure = "crop"
    assert net.closure == "crop"
    with pytest.raises(ValueError, match="`closure` must be one of"):
        net.closure = "stencil"


def test_invimbed_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import invimbed\n"
            "try:\n    import invimbed.nn\nexcept ImportError as e:\n    print(e)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert "pip install torch==2.13.0" in res.stdout and "invimbed[nn]" in res.stdout
