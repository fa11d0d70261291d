r"""Learning dynamics from end-point observations (the paper's Appendix C and E.2).

The data are outputs only: ``y_i^b = y(q; p_i, x_b)``, the state at the fixed time ``q``
of a process started from ``x_b`` at the depths ``p_i`` (eq. (25)). A
parameterised dynamics ``dz/dt = f(t, z; w)`` is fitted so that the output of its
depth-``p_i`` network, ``Z(p_i, x_b; w) = z(q; p_i, x_b)``, matches ``y_i^b``:

    L(w) = 1/(n B) sum_i sum_b C(Z(p_i, x_b; w), y_i^b),   C(z, y) = |P z - y|^2 / 2

(``P`` selects the observed components). Nothing is integrated in ``t``: every output
and gradient comes from imbedding sweeps in ``p`` (`solve_imbedding`), with the
weights as the control, ``theta = w`` (`Constant`).

How this maps to the paper's equations
--------------------------------------
* **eq. (26) puts the cost of datum ``i`` as an impulse ``delta_{t,p_i}`` in
  a running loss. In the imbedded variables that impulse is a *per-depth terminal loss*:
  datum ``i`` is the terminal loss ``T_i(z) = C(z, y_i)`` of the depth-``p_i`` network,
  whose value field at ``p_i`` is ``V_i(p_i, x) = C(Z(p_i, x), y_i)``.
* **eq. (27), ``[grad_z R](p_i, x) = grad C(Z(p_i, x), y_i) . grad_x Z(p_i,
  x)``, is the imbedded adjoint of that field, ``Lam_i(p_i, x) = grad_x V_i(p_i, x)``
  (Theorem 2 with terminal loss ``T_i``); `endpoint_loss` returns it as ``adjoint``.
* **eq. (32) gives the parameter adjoint of the same field,
  ``Lam_w,i(p_i, x) = d/dw C(Z(p_i, x), y_i)``, and ``dL/dw`` is the mean of these over
  the data: the sum that **eq. (28) accumulates depth by depth.

*One sweep per observed component, not per target.* Carrying ``T_i`` literally would
need one sweep per distinct target (every ``(p_i, x_b)``: the targets differ from depth
to depth), each used at a single depth. Instead we use that the imbedded fields are
linear in the terminal loss and that ``C`` enters only through its gradient at the
output (chain rule):

    Lam_w,i(p_i, x) = sum_k dC/dz_k (Z(p_i, x), y_i) * Lam_w^(k)(p_i, x),
    Lam_i(p_i, x)   = sum_k dC/dz_k (Z(p_i, x), y_i) * Lam^(k)(p_i, x),

where ``Lam_w^(k)``, ``Lam^(k)`` are the fields of the *linear* terminal loss
``T^(k)(z) = z_k``: row ``k`` of ``dZ/dw`` and of ``dZ/dx``. One sweep per observed
component ``k`` (terminal loss ``z_k``), batched over all samples ``x_b`` and returning
every depth ``p_i`` at once, therefore gives the exact gradient of every datum: the
number of sweeps per gradient is the number of observed components (one when only a
height is observed), independent of the number of depths and of samples. This is exact
for any differentiable ``C``; the quadratic ``C`` above is what is implemented.

*Why not one accumulated field.* Read literally, eq. (28) accumulates
all data into one adjoint field: ``Lam(p_i) = Lam(p_{i+1}) + [grad_z R](p_i) -
(p_i - p_{i+1})[...]``. The bracket transports ``Lam(p_{i+1})`` to depth ``p_i``, and a
transported field evaluated at ``x`` is the same function of the deeper network's
output (``Z(p_{i+1}, z(p_{i+1}; p_i, x)) = Z(p_i, x)``). The accumulated field at ``p_i``
is therefore ``grad_x sum_{j >= i} C(Z(p_i, x), y_j)``: every shallower target compared
with the output of the deeper network. That is the loss of observations along one
trajectory started at ``p_i`` (Chen et al.'s setting, cf. their Figure 2), not of end
points observed from different starts, so the per-depth fields are kept separate here.

With the jet closure of order 1 the outputs and gradients are exact (to integrator
tolerance) when the model ``f`` is affine in ``z`` (for any dependence on ``w``);
otherwise they carry the closure's truncation error ``O((q - p)^3)`` (docs/theory.md,
"The closures"): the model being fitted is then the imbedded one, which is also the one whose
predictions `solve_imbedding` makes.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.optimize import OptimizeResult, minimize

from .._core.controls import Constant
from .._core.imbedding import solve_imbedding
from .._progress import ProgressBar
from .._core.problem import BolzaProblem
from .._core.validation import as_depths, as_float_array, as_state, describe, require_finite

_SIGMA_ORDER = 5   # tanh derivatives 0..4 (order 3 in z with one theta derivative)


# ---------------------------------------------------------------------------------------
# a small MLP with exact derivatives
# ---------------------------------------------------------------------------------------
class MLPDynamics:
    r"""A one-hidden-layer tanh network as dynamics, with exact derivative tensors.

    ```
    f(t, z; w) = L z + W2 tanh(W1 (z / scale) + c t + b1) + b2
    ```

    ``w`` packs ``W1`` (H, N), ``b1`` (H,), ``c`` (H,) when ``time=True``, ``W2`` (N, H),
    ``b2`` (N,) and ``L`` (N, N) when ``linear=True``, each row-major, in that order.
    The instance is the vectorised dynamics ``f(t, z (B, N), theta (B, n_w))`` of a
    `BolzaProblem` whose control is the weight vector (``Constant(w)``); `derivatives`
    gives every tensor the jet closure needs up to order 2 (``f_z`` ... ``f_zzz``,
    ``f_theta`` ... ``f_zzztheta``), so no finite differences are taken.

    Parameters
    ----------
    n_state : int
        ``N``.
    hidden : int, default 16
        ``H``.
    linear : bool, default False
        Add the linear term ``L z`` (an affine model when the network part is zero).
    time : bool, default False
        Feed ``t`` to the hidden layer (the paper's model is constant in ``t``).
    scale : array_like, shape (N,), optional
        Fixed input scaling (not trained); default ones.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> mlp = invimbed.MLPDynamics(2, hidden=4)
    >>> w = mlp.init_params(seed=0)
    >>> mlp(0.0, np.zeros((3, 2)), w).shape, mlp.n_params
    ((3, 2), 22)
    """

    vectorized = True

    def __init__(self, n_state: int, hidden: int = 16, *, linear: bool = False,
                 time: bool = False, scale: Any = None) -> None:
        for name, v in (("n_state", n_state), ("hidden", hidden)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"`{name}` must be a positive integer, but got {describe(v)}")
        self.n_state, self.hidden = int(n_state), int(hidden)
        self.linear, self.time = bool(linear), bool(time)
        sc = np.ones(self.n_state) if scale is None else as_float_array(scale, "scale")
        sc = np.broadcast_to(sc, (self.n_state,)).astype(float)
        if not np.all(np.isfinite(sc)) or np.any(sc <= 0):
            raise ValueError(f"`scale` must be positive and finite, but got {sc}")
        self.scale = sc.copy()
        N, H = self.n_state, self.hidden
        self._blocks = [("W1", (H, N)), ("b1", (H,))]
        if self.time:
            self._blocks.append(("c", (H,)))
        self._blocks += [("W2", (N, H)), ("b2", (N,))]
        if self.linear:
            self._blocks.append(("L", (N, N)))
        self.n_params = int(sum(np.prod(s) for _, s in self._blocks))

    def __repr__(self) -> str:
        return (f"MLPDynamics(n_state={self.n_state}, hidden={self.hidden}, "
                f"linear={self.linear}, time={self.time}, n_params={self.n_params})")

    def init_params(self, seed: Any = None, *, gain: float = 0.1) -> np.ndarray:
        """Random weights: ``W1 ~ N(0, 1/N)``, ``b1, c ~ N(0, 1/4)``, ``W2 ~ gain N(0, 1/H)``,
        ``b2 = 0``, ``L = 0``: a small, nearly flat initial field."""
        rng = np.random.default_rng(seed)
        parts = []
        for name, shape in self._blocks:
            if name == "W1":
                parts.append(rng.normal(0.0, 1.0 / np.sqrt(self.n_state), shape))
            elif name in ("b1", "c"):
                parts.append(rng.normal(0.0, 0.5, shape))
            elif name == "W2":
                parts.append(gain * rng.normal(0.0, 1.0 / np.sqrt(self.hidden), shape))
            else:
                parts.append(np.zeros(shape))
        return np.concatenate([p.ravel() for p in parts])

    def unpack(self, w: Any) -> dict[str, np.ndarray]:
        """The weight blocks of ``w`` (shape (n_w,) or (B, n_w)); a batch axis is kept."""
        w = np.asarray(w, dtype=float)
        if w.shape[-1] != self.n_params:
            raise ValueError(f"`w` must have n_params = {self.n_params} entries, but got "
                             f"shape {w.shape}")
        out, i = {}, 0
        for name, shape in self._blocks:
            size = int(np.prod(shape))
            out[name] = w[..., i:i + size].reshape(w.shape[:-1] + shape)
            i += size
        return out

    # -- evaluation --------------------------------------------------------------------
    def __call__(self, t: float, z: Any, w: Any) -> np.ndarray:
        """``f(t, z; w)``; ``z`` of shape (B, N) (or (N,)), ``w`` (B, n_w) or (n_w,)."""
        return self.derivative(t, z, w, 0, 0)

    @property
    def derivatives(self) -> dict[str, Callable]:
        """``{"f_z": ..., "f_zzztheta": ...}`` for `BolzaProblem` (``vectorized=True``)."""
        d = {}
        for dz in range(4):
            for dth in (0, 1):
                if dz + dth:
                    key = "f_" + "z" * dz + "theta" * dth
                    d[key] = (lambda t, z, th, dz=dz, dth=dth:
                              self.derivative(t, z, th, dz, dth))
        return d

    def problem(self, q: float = 0.0, **losses: Any) -> BolzaProblem:
        """A `BolzaProblem` with these dynamics and exact derivatives (losses optional)."""
        return BolzaProblem(self, q=q, derivatives=self.derivatives, vectorized=True,
                            **losses)

    def derivative(self, t: float, z: Any, w: Any, dz: int = 0, dth: int = 0) -> np.ndarray:
        """Derivative tensor of order ``dz`` in ``z`` and ``dth`` (0 or 1) in ``w``.

        Axes: batch, output ``i``, then ``dz`` axes for ``z``, then ``n_w`` when ``dth=1``
        (the package's convention).
        """
        if dz > 3 or dth > 1:
            raise ValueError(f"MLPDynamics gives dz <= 3 and dth <= 1, but got dz={dz}, "
                             f"dth={dth}")
        z = np.asarray(z, dtype=float)
        single = z.ndim == 1
        z2 = np.atleast_2d(z)
        Bn, N, H = z2.shape[0], self.n_state, self.hidden
        w = np.asarray(w, dtype=float)
        if w.ndim == 1 or np.all(w == w[:1]):   # one weight vector for the whole batch
            P = self.unpack(np.reshape(w if w.ndim == 1 else w[0], (1, self.n_params)))
        else:
            P = self.unpack(np.broadcast_to(w, (Bn, self.n_params)))
        zs = z2 / self.scale                                       # (B, N)
        a = np.matmul(P["W1"], zs[:, :, None])[:, :, 0] + P["b1"]  # (B, H)
        if self.time:
            a = a + t * P["c"]
        sig = _tanh_derivatives(a, dz + dth + 1)                  # list of (B, H)
        E = P["W1"] / self.scale                                   # (B|1, H, N)
        W2 = P["W2"]                                               # (B|1, N, H)
        prods = _outer_powers(np.broadcast_to(E, (Bn, H, N)), dz)  # (B, H, N, ..., N)
        zaxes = (N,) * dz
        J = int(N ** dz)
        Pk = prods[dz].reshape(Bn, H, J)
        S = sig[dz][:, :, None] * Pk                               # (B, H, J)
        if dth == 0:
            out = np.matmul(W2, S).reshape((Bn, N) + zaxes)
            if dz == 0:
                out = out + P["b2"]
                if self.linear:
                    out = out + np.matmul(P["L"], z2[:, :, None])[:, :, 0]
            elif dz == 1 and self.linear:
                out = out + P["L"]
            return out[0] if single else out
        # dth == 1: one block per parameter group, concatenated along the last axis
        S1 = sig[dz + 1][:, :, None] * Pk                          # (B, H, J)
        W2e = W2[:, :, None, :]                                    # (B|1, N, 1, H)
        blocks = []
        for name, shape in self._blocks:
            if name == "W1":
                term = W2e[..., None] * (np.swapaxes(S1, 1, 2)[:, None, :, :, None]
                                         * zs[:, None, None, None, :])
                if dz >= 1:
                    G = _delta_terms(np.broadcast_to(E, (Bn, H, N)), dz, 1.0 / self.scale)
                    G = sig[dz][:, :, None, None] * G                  # (B, H, J, N)
                    term = term + W2e[..., None] * np.swapaxes(G, 1, 2)[:, None]
                blocks.append(np.broadcast_to(term, (Bn, N, J, H, N)).reshape(Bn, N, J, H * N))
            elif name in ("b1", "c"):
                term = W2e * np.swapaxes(S1, 1, 2)[:, None]            # (B, N, J, H)
                blocks.append(term * (t if name == "c" else 1.0))
            elif name == "W2":
                term = (np.eye(N)[None, :, None, :, None]
                        * np.swapaxes(S, 1, 2)[:, None, :, None, :])   # (B, N, J, N, H)
                blocks.append(term.reshape(Bn, N, J, N * H))
            elif name == "b2":
                term = np.zeros((Bn, N, J, N))
                if dz == 0:
                    term[:, :, 0, :] = np.eye(N)
                blocks.append(term)
            else:  # L
                term = np.zeros((Bn, N, J, N, N))
                if dz == 0:
                    term[:, :, 0] = np.eye(N)[None, :, :, None] * z2[:, None, None, :]
                elif dz == 1:
                    term[:] = (np.eye(N)[:, None, :, None] * np.eye(N)[None, :, None, :])[None]
                blocks.append(term.reshape(Bn, N, J, N * N))
        out = np.concatenate(blocks, axis=-1).reshape((Bn, N) + zaxes + (self.n_params,))
        return out[0] if single else out


def _tanh_derivatives(a: np.ndarray, k: int) -> list[np.ndarray]:
    """``[tanh(a), tanh'(a), ..., tanh^(k)(a)]`` (``k <= 4``)."""
    s = np.tanh(a)
    d1 = 1.0 - s * s
    out = [s, d1, -2.0 * s * d1, d1 * (6.0 * s * s - 2.0), 8.0 * s * d1 * (2.0 - 3.0 * s * s)]
    return out[:k + 1]


def _outer_powers(E: np.ndarray, k: int) -> list[np.ndarray]:
    """``[1, E, E (x) E, ...]`` per hidden unit: ``(B, H, N^j)`` for ``j = 0..k``."""
    B, H, N = E.shape
    out = [np.ones((B, H))]
    cur = np.ones((B, H))
    for j in range(k):
        cur = cur[..., None] * E.reshape((B, H) + (1,) * j + (N,))
        out.append(cur)
    return out


def _delta_terms(E: np.ndarray, k: int, inv_scale: np.ndarray) -> np.ndarray:
    """``sum_l delta_{j_l m} inv_scale_m prod_{l' != l} E[h, j_l']``: shape (B, H, N^k, N)."""
    B, H, N = E.shape
    D = np.diag(inv_scale)                                       # (N, N): (j_l, m)
    lower = _outer_powers(E, k - 1)[k - 1]                       # (B, H, N^(k-1))
    total = np.zeros((B, H) + (N,) * k + (N,))
    for pos in range(k):
        # insert axis j_pos (paired with m through D) into the product of the others
        t = lower[..., None, None] * D.reshape((1, 1) + (1,) * (k - 1) + (N, N))
        # t has axes (B, H, others..., j_pos, m): move j_pos to its place
        t = np.moveaxis(t, 2 + (k - 1), 2 + pos)
        total = total + t
    return total.reshape(B, H, N ** k, N)


# ---------------------------------------------------------------------------------------
# the end-point regression
# ---------------------------------------------------------------------------------------
class _EndpointRegression:
    """Validated data and one `BolzaProblem` per observed component (terminal loss z_k)."""

    def __init__(self, dynamics: Any, x: Any, depths: Any, y: Any, q: float, observed: Any,
                 derivatives: Any, vectorized: Any, solve_kwargs: dict) -> None:
        if not callable(dynamics):
            raise TypeError(f"`dynamics` must be callable f(t, z, w), but got "
                            f"{describe(dynamics)}")
        if derivatives is None:
            derivatives = getattr(dynamics, "derivatives", None)
        if vectorized is None:
            vectorized = bool(getattr(dynamics, "vectorized", False))
        derivatives = dict(derivatives or {})
        bad = [k for k in derivatives if not (isinstance(k, str) and k.startswith("f_"))]
        if bad:
            raise ValueError(f"`derivatives` may only give derivatives of the dynamics "
                             f"('f_z', 'f_theta', ...): the losses are the regression's, but "
                             f"got {bad}")
        try:
            q = float(q)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"`q` must be a real number, but got {describe(q)}") from exc
        self.x, batched = as_state(x, None, "x")
        B, N = self.x.shape
        self.depths = as_depths(depths, q)
        n = self.depths.size
        if observed is None:
            observed = np.arange(N)
        observed = np.atleast_1d(np.asarray(observed))
        if (observed.ndim != 1 or observed.size == 0
                or not np.issubdtype(observed.dtype, np.integer)
                or np.any(observed < 0) or np.any(observed >= N)
                or np.unique(observed).size != observed.size):
            raise ValueError(f"`observed` must list distinct state components in [0, {N}), "
                             f"but got {observed}")
        self.observed = observed.astype(int)
        No = self.observed.size
        yy = as_float_array(y, "y")
        if yy.ndim == 2 and not batched:
            yy = yy[:, None, :]
        if yy.shape != (n, B, No):
            want = f"(n, B, n_obs) = {(n, B, No)}" + ("" if batched else f" or {(n, No)}")
            raise ValueError(f"`y` must have shape {want} (depths, samples, observed "
                             f"components), but got shape {np.shape(y)}")
        if np.any(np.isinf(yy)):
            raise ValueError("`y` must be finite (NaN marks a missing observation)")
        self.mask = np.isfinite(yy)
        if not self.mask.any():
            raise ValueError("`y` has no observations (all NaN)")
        self.y = np.where(self.mask, yy, 0.0)
        self.batched = batched
        self.q = q
        self.dynamics, self.derivs, self.vectorized = dynamics, derivatives, bool(vectorized)
        self.problems = [self._problem(k, N) for k in self.observed]
        self.kwargs = dict(solve_kwargs)
        self.kwargs.setdefault("estimate_error", False)
        if "control" in self.kwargs:
            raise TypeError("`control` is set by the regression (Constant(w)); do not pass it")
        self.n_sweeps = 0
        self.nfev = 0

    def _problem(self, k: int, N: int) -> BolzaProblem:
        e = np.zeros(N)
        e[k] = 1.0
        derivs = dict(self.derivs)
        derivs.update({
            "T_z": lambda z: np.broadcast_to(e, np.shape(z)).copy(),
            "T_zz": lambda z: np.zeros(np.shape(z) + (N,)),
            "T_zzz": lambda z: np.zeros(np.shape(z) + (N, N)),
        })
        return BolzaProblem(self.dynamics, terminal_loss=lambda z: np.asarray(z)[..., k],
                            q=self.q, derivatives=derivs, vectorized=self.vectorized)

    def model_problem(self) -> BolzaProblem:
        return BolzaProblem(self.dynamics, q=self.q, derivatives=self.derivs or None,
                            vectorized=self.vectorized)

    def evaluate(self, w: np.ndarray) -> OptimizeResult:
        ctrl = Constant(w)
        n, B, No = self.y.shape
        N = self.x.shape[1]
        nw = ctrl.n_params
        jac = np.zeros((n, B, No, nw))
        dzdx = np.zeros((n, B, No, N))
        Z = None
        for j, prob in enumerate(self.problems):
            res = solve_imbedding(prob, self.x, self.depths, control=ctrl, **self.kwargs)
            self.n_sweeps += 1
            self.nfev += int(res.nfev)
            if not res.success:
                return OptimizeResult(success=False, loss=np.nan, grad=np.full(nw, np.nan),
                                      message=f"sweep for observed component "
                                              f"{self.observed[j]} failed: {res.message}")
            if Z is None:
                Z = np.asarray(res.z).reshape(n, B, N)
            jac[:, :, j] = np.asarray(res.param_grad).reshape(n, B, nw)
            dzdx[:, :, j] = np.asarray(res.adjoint).reshape(n, B, N)
        resid = np.where(self.mask, Z[:, :, self.observed] - self.y, 0.0)   # dC/dz_k
        per_point = 0.5 * np.sum(resid ** 2, axis=2)                        # (n, B)
        count = n * B
        loss = float(per_point.sum() / count)
        grad = np.einsum("ibk,ibkw->w", resid, jac) / count
        adjoint = np.einsum("ibk,ibkn->ibn", resid, dzdx)     # eq. (27)
        if not self.batched:
            Z, adjoint = Z[:, 0], adjoint[:, 0]
        return OptimizeResult(success=True, message="ok", loss=loss, grad=grad,
                              per_depth=per_point.mean(axis=1), z=Z, residual=resid,
                              jacobian=jac, adjoint=adjoint)


def endpoint_loss(dynamics: Callable, w: Any, x: Any, depths: Any, y: Any, *,
                  q: float = 0.0, observed: Any = None, derivatives: dict | None = None,
                  vectorized: bool | None = None, **solve_kwargs: Any) -> OptimizeResult:
    r"""The end-point regression loss and its gradient in ``w``, by imbedding sweeps only.

    ``L(w) = 1/(n B) sum_i sum_b |Z_obs(p_i, x_b; w) - y_i^b|^2 / 2`` with ``Z`` the
    output of the depth-``p_i`` network of ``dz/dt = f(t, z; w)``; see the module notes
    (docs: "Learning dynamics from end points") for how the per-depth terminal losses
    map to the paper's eqs. (26), (27), (28) and
    (32), and why one sweep per observed component gives every depth and
    sample.

    Parameters
    ----------
    dynamics : callable ``f(t, z, w)``, or a model such as `MLPDynamics`
        The parameterised dynamics, written as the dynamics of a `BolzaProblem` whose
        control is the weight vector (``theta = w``). A model object supplies its own
        ``derivatives`` and ``vectorized`` unless they are given.
    w : array_like, shape (n_w,)
        The weights.
    x : array_like, shape (N,) or (B, N)
        The samples' initial states (inputs).
    depths : array_like, shape (n,)
        The start times ``p_i <= q`` of the observed runs, strictly monotone.
    y : array_like, shape (n, B, n_obs) (or (n, n_obs) for a single ``x``)
        ``y[i, b] = y(q; p_i, x_b)`` restricted to the observed components; NaN marks a
        missing observation (left out of the sum; the mean still divides by ``n B``).
    q : float, default 0.0
        The observation time.
    observed : sequence of int, optional
        Observed state components (default: all). The cost is one sweep per component.
    derivatives : dict, optional
        Exact derivatives of ``f`` (``"f_z"``, ``"f_theta"``, ...; see `BolzaProblem`).
    vectorized : bool, optional
        Whether ``f`` accepts batches (see `BolzaProblem`).
    **solve_kwargs
        Passed to `solve_imbedding` (``estimate_error`` defaults to False).

    Returns
    -------
    OptimizeResult
        ``loss``; ``grad`` (n_w,); ``per_depth`` (n,) mean cost at each depth; ``z``
        (n, B, N) or (n, N), the predictions ``Z(p_i, x_b)``; ``residual`` (n, B, n_obs);
        ``jacobian`` (n, B, n_obs, n_w) ``= dZ_obs/dw``; ``adjoint`` (n, B, N) or (n, N),
        ``grad C . grad_x Z`` (eq. (27)); ``n_sweeps``, ``nfev``;
        ``success``, ``message``.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> f = lambda t, z, w: w[0] * z                      # dz/dt = a z, data from a = 0.5
    >>> depths = np.array([-1.0, -0.5]); y = np.exp(0.5 * -depths)[:, None]
    >>> out = invimbed.endpoint_loss(f, [0.3], [1.0], depths, y)
    >>> bool(out.grad[0] < 0)                             # increase a to fit
    True
    """
    reg = _EndpointRegression(dynamics, x, depths, y, q, observed, derivatives, vectorized,
                              solve_kwargs)
    w = _as_weights(w, "w")
    out = reg.evaluate(w)
    out["n_sweeps"], out["nfev"] = reg.n_sweeps, reg.nfev
    return out


def fit_endpoint_dynamics(dynamics: Callable, w0: Any, x: Any, depths: Any, y: Any, *,
                          q: float = 0.0, observed: Any = None,
                          derivatives: dict | None = None, vectorized: bool | None = None,
                          optimizer: str = "adam", learning_rate: float = 1e-2,
                          epochs: int = 200, gtol: float = 0.0, options: dict | None = None,
                          callback: Callable | None = None, progress: bool = False,
                          **solve_kwargs: Any) -> OptimizeResult:
    r"""Learn ``dz/dt = f(t, z; w)`` from end-point observations ``y(q; p_i, x_b)``.

    The paper's time-series architecture (Appendix C, projectile experiment of Appendix
    E.2): gradient descent on the regression loss of `endpoint_loss`, whose gradient is
    the sum of the per-depth parameter adjoints (eq. (32)) of the per-depth
    terminal losses (eqs. (26), (28)). Each epoch is one
    full-batch gradient, i.e. one imbedding sweep per observed component over all samples
    and depths; there is no forward pass in ``t``.

    Parameters
    ----------
    dynamics, x, depths, y, q, observed, derivatives, vectorized
        As in `endpoint_loss`.
    w0 : array_like, shape (n_w,)
        Initial weights (e.g. ``MLPDynamics.init_params``).
    optimizer : {"adam", "gd", "L-BFGS-B"}
        ``"adam"`` (default; Kingma & Ba, betas 0.9 and 0.999), ``"gd"`` (plain gradient
        descent, as in the paper) or ``"L-BFGS-B"`` (``scipy.optimize.minimize``; usually
        the fastest for these small deterministic full-batch problems; ``learning_rate``
        unused).
    learning_rate : float, default 1e-2
    epochs : int, default 200
        Number of gradient steps (``maxiter`` for L-BFGS-B).
    gtol : float, default 0
        Stop when the gradient's max-norm falls to ``gtol``.
    options : dict, optional
        Extra ``scipy.optimize.minimize`` options for ``"L-BFGS-B"`` (e.g.
        ``{"ftol": 1e-12}``); ``maxiter`` and ``gtol`` come from ``epochs`` and ``gtol``.
    callback : callable ``callback(info)``, optional
        Called after every epoch with an ``OptimizeResult`` (``epoch``, ``loss``, ``w``,
        ``grad``); returning True stops the training.
    progress : bool, default False
        Progress bar (``tqdm`` when installed, else lines on stderr).
    **solve_kwargs
        Passed to `solve_imbedding` (``rtol``, ``atol``, ``order``, ...).

    Returns
    -------
    OptimizeResult
        ``x`` (the trained weights), ``fun`` (loss at ``x``), ``jac`` (its gradient),
        ``history`` (loss before each epoch, then the final loss), ``nit``, ``n_sweeps``,
        ``nfev``, ``success``, ``status``, ``message``, and ``problem`` (a `BolzaProblem`
        of the learned dynamics, no losses) with ``control`` (``Constant(x)``) so that
        ``solve_imbedding(res.problem, x_new, depths, control=res.control).z`` predicts.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> f = lambda t, z, w: w[0] * z
    >>> depths = np.array([-1.0, -0.5]); y = np.exp(0.5 * -depths)[:, None]
    >>> res = invimbed.fit_endpoint_dynamics(f, [0.0], [1.0], depths, y,
    ...                                      optimizer="L-BFGS-B", epochs=50)
    >>> round(float(res.x[0]), 4)
    0.5
    """
    reg = _EndpointRegression(dynamics, x, depths, y, q, observed, derivatives, vectorized,
                              solve_kwargs)
    w = _as_weights(w0, "w0")
    if optimizer not in ("adam", "gd", "L-BFGS-B"):
        raise ValueError(f"`optimizer` must be 'adam', 'gd' or 'L-BFGS-B', but got "
                         f"{optimizer!r}")
    if not isinstance(epochs, (int, np.integer)) or isinstance(epochs, bool) or epochs < 0:
        raise ValueError(f"`epochs` must be an integer >= 0, but got {describe(epochs)}")
    try:
        lr = float(learning_rate)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`learning_rate` must be a number, but got "
                        f"{describe(learning_rate)}") from exc
    if not (np.isfinite(lr) and lr > 0):
        raise ValueError(f"`learning_rate` must be positive and finite, but got {learning_rate!r}")
    if callback is not None and not callable(callback):
        raise TypeError(f"`callback` must be callable, but got {describe(callback)}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"`options` must be a dict, but got {describe(options)}")

    history: list[float] = []
    bar = ProgressBar(progress, int(epochs), "fit_endpoint_dynamics", label="loss",
                      every=max(1, int(epochs) // 20))
    status, message = 0, f"Completed {epochs} epochs."

    def report(epoch: int, w: np.ndarray, out: OptimizeResult) -> bool:
        bar.update(epoch, out.loss)
        if callback is None:
            return False
        info = OptimizeResult(epoch=epoch, loss=out.loss, w=w.copy(), grad=out.grad.copy())
        return callback(info) is True

    try:
        if optimizer == "L-BFGS-B":
            state = {"epoch": 0, "last": None}

            def fun(wv):
                out = reg.evaluate(np.asarray(wv, dtype=float))
                if not out.success:
                    raise _SweepFailure(out.message)
                state["last"] = out
                return out.loss, out.grad

            def cb(intermediate_result):
                state["epoch"] += 1
                history.append(float(intermediate_result.fun))
                if report(state["epoch"], np.asarray(intermediate_result.x), state["last"]):
                    raise StopIteration

            opts = dict(options or {})
            opts.update(maxiter=int(epochs), gtol=float(gtol))
            sres = minimize(fun, w, jac=True, method="L-BFGS-B", callback=cb, options=opts)
            w = np.asarray(sres.x, dtype=float)
            nit, status, message = int(sres.nit), int(sres.status), str(sres.message)
        else:
            m = np.zeros_like(w)
            v = np.zeros_like(w)
            b1, b2, eps = 0.9, 0.999, 1e-8
            nit = 0
            for epoch in range(1, int(epochs) + 1):
                out = reg.evaluate(w)
                if not out.success:
                    raise _SweepFailure(out.message)
                history.append(out.loss)
                if np.max(np.abs(out.grad), initial=0.0) <= gtol:
                    message = f"Gradient max-norm <= gtol = {gtol} after {nit} epochs."
                    break
                if optimizer == "gd":
                    w = w - lr * out.grad
                else:
                    m = b1 * m + (1 - b1) * out.grad
                    v = b2 * v + (1 - b2) * out.grad ** 2
                    mhat = m / (1 - b1 ** epoch)
                    vhat = v / (1 - b2 ** epoch)
                    w = w - lr * mhat / (np.sqrt(vhat) + eps)
                nit = epoch
                if report(epoch, w, out):
                    status, message = 99, f"`callback` stopped the training after {epoch} epochs."
                    break
    except _SweepFailure as exc:
        bar.close()
        return OptimizeResult(x=w, fun=np.nan, jac=None, history=np.array(history),
                              nit=len(history), n_sweeps=reg.n_sweeps, nfev=reg.nfev,
                              success=False, status=-1, message=f"A sweep failed: {exc}",
                              problem=reg.model_problem(), control=Constant(w))
    bar.close()
    final = reg.evaluate(w)
    history.append(final.loss)
    success = bool(final.success) and status == 0
    return OptimizeResult(x=w, fun=final.loss, jac=final.grad, history=np.array(history),
                          nit=nit, n_sweeps=reg.n_sweeps, nfev=reg.nfev, success=bool(success),
                          status=status, message=message if final.success else final.message,
                          problem=reg.model_problem(), control=Constant(w))


class _SweepFailure(RuntimeError):
    pass


def _as_weights(w: Any, name: str) -> np.ndarray:
    arr = as_float_array(w, name)
    if arr.ndim > 1:
        raise ValueError(f"`{name}` must be a 1-D array of weights, but got shape {arr.shape}")
    arr = np.atleast_1d(arr).astype(float).copy()
    if arr.size == 0:
        raise ValueError(f"`{name}` must not be empty")
    require_finite(arr, name)
    return arr
