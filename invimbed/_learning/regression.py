r"""The end-point regression of the paper's Appendix C, eqs. (25) to (28), by imbedding.

The data are outputs only (eq. (25)): ``y_i^b = y(q; p_i, x_b)``, the state at the fixed
time ``q`` of a process started from ``x_b`` at the depths ``p_i``. A parameterised
dynamics ``dz/dt = f(t, z; w)`` is fitted so that the output of its depth-``p_i``
network, ``Z(p_i, x_b; w) = z(q; p_i, x_b)``, matches ``y_i^b``:

    L(w) = 1/(n B) sum_i sum_b C(Z(p_i, x_b; w), y_i^b),   C(z, y) = |P z - y|^2 / 2

(``P`` selects the observed components). Nothing is integrated in ``t``: every output
and gradient comes from imbedding sweeps in ``p`` (`solve_imbedding`), with the
weights as the control, ``theta = w`` (`Constant`).

How this maps to the paper's equations
--------------------------------------
* Eq. (26) puts the cost of datum ``i`` as an impulse ``delta_{t,p_i}`` in a running
  loss. In the imbedded variables that impulse is a *per-depth terminal loss*: datum
  ``i`` is the terminal loss ``T_i(z) = C(z, y_i)`` of the depth-``p_i`` network, whose
  value field at ``p_i`` is ``V_i(p_i, x) = C(Z(p_i, x), y_i)``.
* Eq. (27), ``[grad_z R](p_i, x) = grad C(Z(p_i, x), y_i) . grad_x Z(p_i, x)``, is the
  imbedded adjoint of that field, ``Lam_i(p_i, x) = grad_x V_i(p_i, x)`` (Theorem 2 with
  terminal loss ``T_i``); `endpoint_loss` returns it as ``adjoint``.
* Eq. (32) gives the parameter adjoint of the same field,
  ``Lam_w,i(p_i, x) = d/dw C(Z(p_i, x), y_i)``, and ``dL/dw`` is the mean of these over
  the data: the sum that eq. (28) accumulates depth by depth.

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

*Why not one accumulated field.* Read literally, eq. (28) accumulates all data into one
adjoint field: ``Lam(p_i) = Lam(p_{i+1}) + [grad_z R](p_i) - (p_i - p_{i+1})[...]``. The
bracket transports ``Lam(p_{i+1})`` to depth ``p_i``, and a transported field evaluated
at ``x`` is the same function of the deeper network's output
(``Z(p_{i+1}, z(p_{i+1}; p_i, x)) = Z(p_i, x)``). The accumulated field at ``p_i`` is
therefore ``grad_x sum_{j >= i} C(Z(p_i, x), y_j)``: every shallower target compared
with the output of the deeper network. That is the loss of observations along one
trajectory started at ``p_i`` (Chen et al.'s setting, cf. their Figure 2), not of end
points observed from different starts, so the per-depth fields are kept separate here
(docs/theory.md, "Where the code departs from the printed paper", item 8).

With the jet closure of order 1 the outputs and gradients are exact (to integrator
tolerance) when the model ``f`` is affine in ``z`` (for any dependence on ``w``);
otherwise they carry the closure's truncation error ``O((q - p)^3)`` (docs/theory.md,
"The closures"): the model being fitted is then the imbedded one, which is also the one
whose predictions `solve_imbedding` makes.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import numpy as np
from scipy.optimize import OptimizeResult

from .._core.problem.open_loop import Constant
from .._core.sweep.imbedding import solve_imbedding
from .._core.problem.bolza import BolzaProblem
from .._core.inputs.validation import (SOLVE_IVP_OPTIONS, as_bool, as_depths,
                                       as_float_array, as_real, as_state, check_options,
                                       describe, require_finite)


def solve_options() -> tuple[str, ...]:
    """The keyword arguments the regression passes on to `solve_imbedding`: its own
    keyword-only parameters except ``control`` (the regression sets it to
    ``Constant(w)``), and the `solve_ivp` options it forwards."""
    params = inspect.signature(solve_imbedding).parameters.values()
    own = [p.name for p in params
           if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "control"]
    return tuple(own) + tuple(o for o in SOLVE_IVP_OPTIONS if o not in own)


class EndpointRegression:
    """The validated data of eq. (25) and one `BolzaProblem` per observed component
    (terminal loss ``z_k``); `evaluate` gives the loss and its gradient at ``w``.

    ``where`` names the public function in the message about unknown keywords.
    """

    def __init__(self, dynamics: Any, x: Any, depths: Any, y: Any, q: Any, observed: Any,
                 derivatives: Any, vectorized: Any, solve_kwargs: Mapping[str, Any], *,
                 where: str) -> None:
        if not callable(dynamics):
            raise TypeError(f"`dynamics` must be callable f(t, z, w), but got "
                            f"{describe(dynamics)}")
        if "control" in solve_kwargs:
            raise TypeError("`control` is set by the regression (Constant(w)); do not pass "
                            "it")
        check_options(solve_kwargs, solve_options(), where)
        if derivatives is None:
            derivatives = getattr(dynamics, "derivatives", None)
        if derivatives is not None and not isinstance(derivatives, Mapping):
            raise TypeError(f"`derivatives` must be a dict of derivative functions "
                            f"('f_z', 'f_theta', ...), but got {describe(derivatives)}")
        if vectorized is None:
            vectorized = getattr(dynamics, "vectorized", False)
        self.vectorized = as_bool(vectorized, "vectorized")
        derivatives = dict(derivatives or {})
        bad = [k for k in derivatives if not (isinstance(k, str) and k.startswith("f_"))]
        if bad:
            raise ValueError(f"`derivatives` must give only derivatives of the dynamics "
                             f"('f_z', 'f_theta', ...; the losses are the regression's), "
                             f"but got {bad}")
        self.q = q = as_real(q, "q")
        self.x, batched = as_state(x, _model_size(dynamics, "n_state"), "x")
        B, N = self.x.shape
        self.depths = as_depths(depths, q)
        n = self.depths.size
        self.observed = _as_observed(observed, N)
        No = self.observed.size
        yy = as_float_array(y, "y")
        if yy.ndim == 2 and not batched:
            yy = yy[:, None, :]
        if yy.shape != (n, B, No):
            want = f"(n, B, n_obs) = {(n, B, No)}" + ("" if batched else f" or {(n, No)}")
            raise ValueError(f"`y` must have shape {want} (depths, samples, observed "
                             f"components), but got shape {np.shape(y)}")
        if np.any(np.isinf(yy)):
            bad_at = tuple(int(i) for i in np.argwhere(np.isinf(yy))[0])
            raise ValueError(f"`y` must be finite or NaN (NaN marks a missing "
                             f"observation), but got an infinite entry at index {bad_at}")
        self.mask = np.isfinite(yy)
        if not self.mask.any():
            raise ValueError("`y` must hold at least one observation, but got only NaN "
                             "(NaN marks a missing observation)")
        self.y = np.where(self.mask, yy, 0.0)
        self.batched = batched
        self.dynamics, self.derivs = dynamics, derivatives
        self.problems = [self._problem(k, N) for k in self.observed]
        self.kwargs = dict(solve_kwargs)
        self.kwargs.setdefault("estimate_error", False)
        self.n_sweeps = 0
        self.nfev = 0

    def weights(self, w: Any, name: str) -> np.ndarray:
        """``w`` as a finite 1-D float array, of the model's size when it declares one."""
        arr = as_float_array(w, name)
        if arr.ndim > 1:
            raise ValueError(f"`{name}` must be a 1-D array of weights, but got shape "
                             f"{arr.shape}")
        arr = np.atleast_1d(arr).astype(float).copy()
        n_params = _model_size(self.dynamics, "n_params")
        if arr.size == 0 or (n_params is not None and arr.size != n_params):
            want = "non-empty" if n_params is None else f"of size n_params = {n_params}"
            raise ValueError(f"`{name}` must be {want}, but got shape {arr.shape}")
        require_finite(arr, name)
        return arr

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
        """The learned dynamics as a `BolzaProblem` without losses, for predictions."""
        return BolzaProblem(self.dynamics, q=self.q, derivatives=self.derivs or None,
                            vectorized=self.vectorized)

    def evaluate(self, w: np.ndarray) -> OptimizeResult:
        """Loss, gradient and per-datum fields at ``w``: one sweep per observed component."""
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
        grad = np.einsum("ibk,ibkw->w", resid, jac) / count                 # eqs. (28), (32)
        adjoint = np.einsum("ibk,ibkn->ibn", resid, dzdx)                   # eq. (27)
        if not self.batched:
            Z, adjoint = Z[:, 0], adjoint[:, 0]
        return OptimizeResult(success=True, message="ok", loss=loss, grad=grad,
                              per_depth=per_point.mean(axis=1), z=Z, residual=resid,
                              jacobian=jac, adjoint=adjoint)


def _model_size(dynamics: Any, attr: str) -> int | None:
    """A model's declared ``n_state`` or ``n_params`` (`MLPDynamics` has both), else None."""
    value = getattr(dynamics, attr, None)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return None


def _as_observed(observed: Any, N: int) -> np.ndarray:
    if observed is None:
        return np.arange(N)
    if isinstance(observed, (str, bytes)):
        raise TypeError(f"`observed` must be a sequence of int, but got {describe(observed)}")
    arr = np.atleast_1d(np.asarray(observed))
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"`observed` must be a sequence of int (state components), but got "
                        f"{describe(observed)}")
    if (arr.ndim != 1 or arr.size == 0 or np.any(arr < 0) or np.any(arr >= N)
            or np.unique(arr).size != arr.size):
        raise ValueError(f"`observed` must list distinct state components in [0, {N}), "
                         f"but got {arr.tolist()}")
    return arr.astype(int)


def endpoint_loss(dynamics: Callable, w: Any, x: Any, depths: Any, y: Any, *,
                  q: float = 0.0, observed: Any = None, derivatives: dict | None = None,
                  vectorized: bool | None = None, **solve_kwargs: Any) -> OptimizeResult:
    r"""The end-point regression loss and its gradient in ``w``, by imbedding sweeps only.

    ``L(w) = 1/(n B) sum_i sum_b |Z_obs(p_i, x_b; w) - y_i^b|^2 / 2`` for the outputs
    ``Z`` of ``dz/dt = f(t, z; w)`` (eqs. (25) to (28), (32)), one sweep per observed
    component. Details: docs/optimization.md, "endpoint_loss in detail".

    Parameters
    ----------
    dynamics : callable ``f(t, z, w)``, or a model such as `MLPDynamics`
        The parameterised dynamics (the control is the weight vector, ``theta = w``).
    w : array_like, shape (n_w,)
        The weights; finite.
    x : array_like, shape (N,) or (B, N)
        The samples' initial states (inputs); finite.
    depths : array_like, shape (n,)
        The start times ``p_i <= q`` of the observed runs, strictly monotone.
    y : array_like, shape (n, B, n_obs) (or (n, n_obs) for a single ``x``)
        ``y[i, b] = y(q; p_i, x_b)`` (eq. (25)); NaN marks a missing observation.
    q : float, default 0.0
        The observation time.
    observed : sequence of int, optional
        Observed state components (default: all); one sweep per component.
    derivatives : dict, optional
        Exact derivatives of ``f`` (``"f_z"``, ``"f_theta"``, ...; see `BolzaProblem`).
    vectorized : bool, optional
        Whether ``f`` accepts batches (see `BolzaProblem`).
    **solve_kwargs
        Passed to `solve_imbedding` (``estimate_error`` defaults to False).

    Returns
    -------
    OptimizeResult
        ``loss`` and ``grad`` (n_w,) (what ``scipy.optimize.minimize(..., jac=True)``
        expects), ``per_depth``, ``z``, ``residual``, ``jacobian``, ``adjoint``,
        ``n_sweeps``, ``nfev``, ``success``, ``message``.

    Raises
    ------
    TypeError
        A wrong type, an unknown keyword argument, or ``control``.
    ValueError
        A wrong value: shapes, non-finite ``x`` or ``w``, infinite ``y`` or no
        observation, depths not monotone or above ``q``, bad ``observed``.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> f = lambda t, z, w: w[0] * z                      # dz/dt = a z, data from a = 0.5
    >>> depths = np.array([-1.0, -0.5]); y = np.exp(0.5 * -depths)[:, None]
    >>> out = invimbed.endpoint_loss(f, [0.3], [1.0], depths, y)
    >>> bool(out.grad[0] < 0)                             # increase a to fit
    True
    >>> from scipy.optimize import minimize                # any gradient-based method
    >>> def fun(w):
    ...     out = invimbed.endpoint_loss(f, w, [1.0], depths, y)
    ...     return out.loss, out.grad
    >>> round(float(minimize(fun, [0.0], jac=True, method="BFGS").x[0]), 4)
    0.5
    """
    reg = EndpointRegression(dynamics, x, depths, y, q, observed, derivatives, vectorized,
                             solve_kwargs, where="endpoint_loss")
    out = reg.evaluate(reg.weights(w, "w"))
    out["n_sweeps"], out["nfev"] = reg.n_sweeps, reg.nfev
    return out
