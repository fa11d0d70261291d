"""The start of `solve_ocp` and `invimbed.OCPSolver`: the default straight line, a warm
start given as a previous result or a dict of `GUESS_KEYS` (placed at its own node
times), and the last solution moved on by some intervals (multipliers included) for a
receding horizon (docs/optimization.md, "Warm starts").
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import OptimizeResult

from ..._core.inputs.validation import as_float_array, as_real, describe
from .collocation import Collocation
from .constraints import shift_index
from .shooting import Shooting


def _get(guess: Any, key: str) -> Any:
    if isinstance(guess, dict):
        return guess.get(key)
    return getattr(guess, key, None)


#: The keys of an `initial_guess` dict.
GUESS_KEYS = ("states", "controls", "horizon", "times")


def _guess_fractions(gt: Any, rows: int, nodes: int, sh: Shooting, what: str) -> np.ndarray:
    """The node fractions of a guess of ``rows`` nodes: its ``times`` as fractions of
    their span; without them this grid's own nodes where the guess has as many, and
    equally spaced fractions otherwise."""
    if gt is not None:
        if gt.size != rows:
            raise ValueError(f"`initial_guess['times']` has {gt.size} node times but "
                             f"`initial_guess['{what}']` has {nodes} rows (needs "
                             f"{rows} times)")
        return (gt - gt[0]) / (gt[-1] - gt[0])
    return sh.tau if rows == sh.K + 1 else np.linspace(0.0, 1.0, rows)


def _initial_guess(guess: Any, sh: Shooting, target: np.ndarray | None, u_lo: np.ndarray,
                   u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The start ``(S, U, H)``: the straight line to the target with controls 0 (clipped),
    or the warm start ``guess`` (a result or a dict of `GUESS_KEYS`) on this grid."""
    K, N, M = sh.K, sh.n, sh.m
    H = sh.horizon
    end = sh.x if target is None else np.where(np.isnan(target), sh.x, target)
    S = sh.x[None, :] + sh.tau[:, None] * (end - sh.x)[None, :]
    U = np.tile(np.clip(0.0, u_lo, u_hi), (K, 1))
    if guess is None:
        return S, U, H
    if not isinstance(guess, dict) and not hasattr(guess, "states"):
        raise TypeError(f"`initial_guess` must be a solve_ocp result or a dict with "
                        f"{', '.join(map(repr, GUESS_KEYS))}, but got {describe(guess)}")
    if isinstance(guess, dict) and not isinstance(guess, OptimizeResult):
        unknown = sorted(set(guess) - set(GUESS_KEYS), key=str)
        if unknown:
            raise ValueError(f"`initial_guess` has the unknown key(s) "
                             f"{', '.join(map(repr, unknown))}; the keys are "
                             f"{', '.join(map(repr, GUESS_KEYS))}")
    gH = _get(guess, "horizon")
    if gH is not None and sh.free_horizon:
        H = as_real(gH, "initial_guess['horizon']", positive=True)
    gS, gU = _get(guess, "states"), _get(guess, "controls")
    gt = _get(guess, "times")
    if gt is not None:
        gt = as_float_array(gt, "initial_guess['times']")
        if gt.ndim != 1 or gt.size < 2 or not np.all(np.isfinite(gt)) or not np.all(
                np.diff(gt) > 0):
            raise ValueError(f"`initial_guess['times']` must be the guess's node times, "
                             f"finite and strictly increasing, shape (K' + 1,), but got "
                             f"{describe(gt)}")
    if gS is not None:
        gS = as_float_array(gS, "initial_guess['states']")
        if gS.ndim != 2 or gS.shape[1] != N or gS.shape[0] < 2:
            raise ValueError(f"`initial_guess['states']` must have shape (K' + 1, {N}), but got "
                             f"shape {gS.shape}")
        gtau = _guess_fractions(gt, gS.shape[0], gS.shape[0], sh, "states")
        S = np.stack([np.interp(sh.tau, gtau, gS[:, i]) for i in range(N)], axis=1)
    if gU is not None:
        gU = as_float_array(gU, "initial_guess['controls']")
        if gU.ndim == 1 and M == 1:
            gU = gU[:, None]
        if gU.ndim != 2 or gU.shape[1] != M:
            raise ValueError(f"`initial_guess['controls']` must have shape (K', {M}), but got "
                             f"shape {gU.shape}")
        gtau = _guess_fractions(gt, gU.shape[0] + 1, gU.shape[0], sh, "controls")
        mid = 0.5 * (sh.tau[:-1] + sh.tau[1:])
        idx = np.clip(np.searchsorted(gtau, mid, side="right") - 1, 0, gU.shape[0] - 1)
        U = np.clip(gU[idx], u_lo, u_hi)
    return S, U, float(H)


def moved(w: np.ndarray, multipliers: tuple | None, nlp: Any, shift: int
          ) -> tuple[np.ndarray, tuple | None]:
    """The solution ``w`` (and its IPOPT multipliers ``(y, z_lower, z_upper)``, if any)
    moved ``shift`` intervals on, for the next window of a receding horizon: interval
    ``k`` takes the controls, end state and multipliers of interval ``k + shift``, the
    last one's repeated; the horizon and the multipliers of the terminal constraints
    stay. The point is clipped into the bounds. (Radau collocation: its interior
    states and the multipliers of its equations move with their interval,
    `Collocation.moved_index`.)"""
    sh = nlp.sh
    idx = (sh.moved_index(shift) if isinstance(sh, Collocation) else
           shift_index(sh.K, sh.block, shift, int(sh.free_horizon)))
    w = np.clip(np.asarray(w, dtype=float)[idx], nlp.lb, nlp.ub)
    if multipliers is None:
        return w, None
    y, z_lo, z_hi = multipliers
    return w, (np.asarray(y)[nlp.shifted_rows(shift)], np.asarray(z_lo)[idx],
               np.asarray(z_hi)[idx])
