r"""Training on end points: the loop around the regression of `regression.py`.

Every epoch is one full-batch gradient of `endpoint_loss` (one imbedding sweep per
observed component, all samples and depths at once), handed to an optimiser.

Which optimiser, and why these
------------------------------
* ``"L-BFGS-B"`` is `scipy.optimize.minimize`, used as it is. The loss is deterministic,
  full-batch and smooth, with tens to hundreds of weights: the setting quasi-Newton
  methods are made for, and much faster than Adam here (docs: "Optimisation", the
  projectile table). Any other gradient-based method of `minimize` can be used on
  `endpoint_loss` directly (its ``loss, grad`` are ``fun, jac``).
* ``"adam"`` (the default) is kept: scipy has no Adam, and for a nonlinear model the
  imbedded gradient carries the closure's truncation error, so it is not exactly the
  gradient of the imbedded loss and L-BFGS-B's line search can stop early; Adam does not
  rely on the two being consistent. It is the six lines of Kingma & Ba's Algorithm 1
  (`adam_step`). ``torch.optim.Adam`` would be the same update on a numpy vector of a
  few hundred weights, with a conversion each epoch and results that would depend on
  whether the optional torch extra is installed; the core does not use torch.
* ``"gd"`` is the paper's plain gradient descent (Appendix E.2), for reproduction.
"""

from __future__ import annotations

import difflib
import warnings
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import numpy as np
from scipy.optimize import OptimizeResult, OptimizeWarning, minimize

from .._core.problem.open_loop import Constant
from .._core.results.families import FitResult
from .._core.results.status import Status
from .._core.inputs.validation import as_bool, as_int, as_real, check_callable, describe
from .._progress import ProgressBar
from .regression import EndpointRegression

#: The optimisers, and the ``options`` each accepts (``maxiter`` and ``gtol`` of
#: L-BFGS-B come from ``epochs`` and ``gtol``).
OPTIMIZERS: dict[str, tuple[str, ...]] = {
    "adam": ("beta1", "beta2", "eps"),
    "gd": (),
    "L-BFGS-B": ("maxcor", "ftol", "maxfun", "maxls"),
}


def adam_step(w: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, k: int,
              learning_rate: float, beta1: float = 0.9, beta2: float = 0.999,
              eps: float = 1e-8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step ``k`` (from 1) of Adam: Kingma & Ba, "Adam: A method for stochastic
    optimization", ICLR 2015, Algorithm 1. Returns the new ``(w, m, v)``; ``m`` and
    ``v`` (the moment estimates) start at zero."""
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad ** 2
    m_hat = m / (1 - beta1 ** k)
    v_hat = v / (1 - beta2 ** k)
    return w - learning_rate * m_hat / (np.sqrt(v_hat) + eps), m, v


def fit_endpoint_dynamics(dynamics: Callable, w0: Any, x: Any, depths: Any, y: Any, *,
                          q: float = 0.0, observed: Any = None,
                          derivatives: dict | None = None, vectorized: bool | None = None,
                          optimizer: str = "adam", learning_rate: float = 1e-2,
                          epochs: int = 200, gtol: float = 0.0, options: dict | None = None,
                          callback: Callable | None = None, progress: bool = False,
                          **solve_kwargs: Any) -> FitResult:
    r"""Learn ``dz/dt = f(t, z; w)`` from end-point observations ``y(q; p_i, x_b)``.

    The paper's time-series architecture (Appendix C): the loss of `endpoint_loss`
    (eqs. (25), (26)) minimised with its gradient (eqs. (28), (32)), one imbedding sweep
    per observed component and epoch, no forward pass in ``t``. Details:
    docs/optimization.md, "fit_endpoint_dynamics in detail".

    Parameters
    ----------
    dynamics, x, depths, y, q, observed, derivatives, vectorized
        As in `endpoint_loss`.
    w0 : array_like, shape (n_w,)
        Initial weights (e.g. ``MLPDynamics.init_params``); finite.
    optimizer : {"adam", "gd", "L-BFGS-B"}
        ``"L-BFGS-B"`` is usually fastest; ``"adam"`` (default) tolerates the closure's
        error in the gradient; ``"gd"`` is the paper's gradient descent.
    learning_rate : float, default 1e-2
        Step size of ``"adam"`` and ``"gd"`` (unused by L-BFGS-B).
    epochs : int, default 200
        Number of gradient steps (``maxiter`` for L-BFGS-B).
    gtol : float, default 0
        Stop when the gradient's max-norm falls to ``gtol``.
    options : dict, optional
        The optimiser's options (Adam's ``beta1``, ``beta2``, ``eps``; L-BFGS-B's).
    callback : callable ``callback(info)``, optional
        Called after every epoch (``epoch``, ``w``, ``loss``, ``grad``); True stops.
    progress : bool, default False
        Progress bar (``tqdm`` when installed, else lines on stderr).
    **solve_kwargs
        Passed to `solve_imbedding`; an unknown keyword is a TypeError.

    Returns
    -------
    FitResult
        ``x`` (the trained weights), ``fun``, ``jac``, ``history``, ``nit``,
        ``n_sweeps``, ``nfev``, ``success``, ``status`` (an `invimbed.Status`, one of
        `FitResult.STATUS_CODES`, docs/results-and-status.md: 0, -2 where L-BFGS-B
        stopped short, with scipy's code in ``solver_status``, -4 where ``callback``
        stopped, -1 where a sweep failed), ``message``, ``warnings``, and ``problem``
        with ``control`` so that ``solve_imbedding(res.problem, x_new, depths,
        control=res.control).z`` predicts.

    Raises
    ------
    TypeError, ValueError
        As in `endpoint_loss`, and for a bad ``optimizer``, ``epochs``,
        ``learning_rate``, ``gtol``, ``options``, ``callback`` or ``progress``.

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
    reg = EndpointRegression(dynamics, x, depths, y, q, observed, derivatives, vectorized,
                             solve_kwargs, where="fit_endpoint_dynamics")
    w = reg.weights(w0, "w0")
    if not isinstance(optimizer, str):
        raise TypeError(f"`optimizer` must be a string, but got {describe(optimizer)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"`optimizer` must be one of {', '.join(map(repr, OPTIMIZERS))}, "
                         f"but got {optimizer!r}")
    epochs = as_int(epochs, "epochs", minimum=0)
    lr = as_real(learning_rate, "learning_rate", positive=True)
    gtol = as_real(gtol, "gtol", nonnegative=True)
    opts = _check_optimizer_options(optimizer, options)
    check_callable(callback, "callback", allow_none=True)
    progress = as_bool(progress, "progress")

    bar = ProgressBar(progress, epochs, "fit_endpoint_dynamics", label="loss",
                      every=max(1, epochs // 20))

    def report(epoch: int, w: np.ndarray, out: OptimizeResult) -> bool:
        bar.update(epoch, out.loss)
        if callback is None:
            return False
        info = OptimizeResult(epoch=epoch, loss=out.loss, w=w.copy(), grad=out.grad.copy())
        return callback(info) is True

    run = _lbfgsb if optimizer == "L-BFGS-B" else _first_order
    state = SimpleNamespace(w=w, out=None, history=[], nit=0, status=Status.SUCCESS,
                            solver_status=None, message=f"Completed {epochs} epochs.")
    try:
        run(reg, state, optimizer, lr, epochs, gtol, opts, report)
    except _SweepFailure as exc:
        return _result(reg, state, None, Status.FAILED, f"A sweep failed: {exc}")
    finally:
        bar.close()
    return _result(reg, state, state.out, state.status, state.message)


def _check_optimizer_options(optimizer: str, options: Any) -> dict:
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(f"`options` must be a dict, but got {describe(options)}")
    if optimizer == "L-BFGS-B":
        for key, arg in (("maxiter", "epochs"), ("gtol", "gtol")):
            if key in options:
                raise TypeError(f"`options` must not set {key!r}: pass `{arg}` instead")
    allowed = OPTIMIZERS[optimizer]
    known = [k for names in OPTIMIZERS.values() for k in names]
    unknown = [k for k in options if k not in known]
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(str(k), allowed or known, n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise TypeError(f"`options` for optimizer={optimizer!r} must use only "
                        f"{', '.join(map(repr, allowed)) or 'no options'}, but got "
                        f"{', '.join(hints)}")
    other = [k for k in options if k not in allowed]
    if other:   # as scipy.optimize.minimize does with another method's options
        warnings.warn(f"`options` {', '.join(map(repr, other))} are not used by "
                      f"optimizer={optimizer!r} (it takes "
                      f"{', '.join(map(repr, allowed)) or 'no options'}); ignored",
                      OptimizeWarning, stacklevel=3)
        options = {k: v for k, v in options.items() if k in allowed}
    opts = dict(options)
    if optimizer == "adam":
        for key, default in (("beta1", 0.9), ("beta2", 0.999)):
            b = as_real(opts.get(key, default), f"options['{key}']")
            if not 0.0 <= b < 1.0:
                raise ValueError(f"`options['{key}']` must be in [0, 1), but got {b!r}")
            opts[key] = b
        opts["eps"] = as_real(opts.get("eps", 1e-8), "options['eps']", positive=True)
    return opts


def _first_order(reg: EndpointRegression, state: SimpleNamespace, optimizer: str, lr: float,
                 epochs: int, gtol: float, opts: dict, report: Callable) -> None:
    """Adam or gradient descent; ``state`` holds the current weights and evaluation."""
    w = state.w
    out = _evaluate(reg, w)
    state.out = out
    state.history.append(out.loss)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for epoch in range(1, epochs + 1):
        if np.max(np.abs(out.grad), initial=0.0) <= gtol:
            state.message = f"Gradient max-norm <= gtol = {gtol} after {epoch - 1} epochs."
            return
        if optimizer == "gd":
            w = w - lr * out.grad
        else:
            w, m, v = adam_step(w, out.grad, m, v, epoch, lr, **opts)
        out = _evaluate(reg, w)
        state.w, state.out, state.nit = w, out, epoch
        state.history.append(out.loss)
        if report(epoch, w, out):
            state.status = Status.STOPPED
            state.message = f"`callback` stopped the training after {epoch} epochs."
            return


def _lbfgsb(reg: EndpointRegression, state: SimpleNamespace, optimizer: str, lr: float,
            epochs: int, gtol: float, opts: dict, report: Callable) -> None:
    """`scipy.optimize.minimize(method="L-BFGS-B")`; the last evaluation is cached so that
    the callback and the result reuse it instead of sweeping again."""
    cache: dict[str, Any] = {}

    def at(wv: np.ndarray) -> OptimizeResult:
        wv = np.asarray(wv, dtype=float)
        if "w" not in cache or not np.array_equal(cache["w"], wv):
            cache["w"], cache["out"] = wv.copy(), _evaluate(reg, wv)
        return cache["out"]

    def fun(wv: np.ndarray) -> tuple[float, np.ndarray]:
        out = at(wv)
        if not state.history:
            state.history.append(out.loss)
        return out.loss, out.grad

    def cb(intermediate_result: Any) -> None:
        # scipy >= 1.11 passes an OptimizeResult, older versions the iterate itself
        wk = np.array(getattr(intermediate_result, "x", intermediate_result), dtype=float)
        out = at(wk)
        state.nit += 1
        state.w, state.out = wk, out
        state.history.append(out.loss)
        if report(state.nit, wk, out):
            raise _Stopped

    try:
        sres = minimize(fun, state.w, jac=True, method="L-BFGS-B", callback=cb,
                        options=dict(opts, maxiter=epochs, gtol=gtol))
    except _Stopped:
        state.status = Status.STOPPED
        state.message = f"`callback` stopped the training after {state.nit} epochs."
        return
    state.w = np.asarray(sres.x, dtype=float)
    state.out = at(state.w)
    if not state.history:
        state.history = [state.out.loss]
    state.nit, state.solver_status, state.message = (int(sres.nit), int(sres.status),
                                                     str(sres.message))
    state.status = Status.SUCCESS if sres.success else Status.NOT_CONVERGED


def _evaluate(reg: EndpointRegression, w: np.ndarray) -> OptimizeResult:
    out = reg.evaluate(w)
    if not out.success:
        raise _SweepFailure(out.message)
    return out


def _result(reg: EndpointRegression, state: SimpleNamespace, out: OptimizeResult | None,
            status: Status, message: str) -> FitResult:
    """The `FitResult` of `fit_endpoint_dynamics`: the one place it is built."""
    w = state.w
    ok = out is not None
    return FitResult(x=w, fun=out.loss if ok else np.nan, jac=out.grad if ok else None,
                     history=np.array(state.history), nit=state.nit,
                     n_sweeps=reg.n_sweeps, nfev=reg.nfev, success=ok and status.success,
                     status=status, solver_status=state.solver_status, message=message,
                     problem=reg.model_problem(), control=Constant(w), warnings=[])


class _SweepFailure(RuntimeError):
    pass


class _Stopped(Exception):
    """Raised by the L-BFGS-B callback when the user's callback asks to stop."""
