"""Which argument a wrong size belongs to: the diagnosis behind the messages of
`invimbed.BolzaProblem.check_shapes` when a user's function, at its first call, returns
the wrong shape or reads beyond ``theta`` or ``z`` (``control`` or ``x`` is named)."""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

#: numpy's message for an index out of range: "index 0 is out of bounds for axis 0 with
#: size 0".
_INDEX_ERROR = re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)")


def theta_size_that_fits(fn: Callable, t: float, z: np.ndarray, theta: np.ndarray,
                          expected: tuple) -> int | None:
    """A size of theta, other than its own, with which ``fn`` returns the
    ``expected`` shape (None if none of those tried does): then the control, not
    ``x``, has the wrong size."""
    M, N = theta.shape[-1], z.shape[-1]
    tried = [N] + list(range(M - 1, 0, -1)) + [M + 1, M + 2, M + 4, M + 16]
    for size in dict.fromkeys(k for k in tried if k != M and k >= 1):
        longer = np.zeros(theta.shape[:-1] + (size,))
        k = min(size, M)
        longer[..., :k] = theta[..., :k]
        try:
            with np.errstate(all="ignore"):
                out = np.asarray(fn(t, z, longer), dtype=float)
        except Exception:
            continue
        if out.shape == expected:
            return size
    return None

def index_error(exc: IndexError, name: str, fn: Callable, which: str, t: float,
                z: np.ndarray, theta: np.ndarray, control: str, *,
                vectorized: bool) -> Exception:
    """Turn the IndexError of a user function at the first point into a ValueError
    naming ``control`` (or ``x``) and the index the function read: the call is
    repeated with a longer ``theta`` (then ``z``); the one whose lengthening cures
    it is the culprit. Returns the original error where neither does."""
    m = _INDEX_ERROR.search(str(exc))
    index = int(m.group(1)) if m else None

    def longer(a: np.ndarray) -> np.ndarray:
        size = a.shape[-1]
        need = size + 16 if index is None else max(size + 1, index + 1, -index)
        pad = np.zeros(a.shape[:-1] + (need - size,))
        return np.concatenate([a, pad], axis=-1)

    def cured(zz: np.ndarray, th: np.ndarray) -> bool:
        try:
            with np.errstate(all="ignore"):
                fn(zz) if which == "T" else fn(t, zz, th)
        except IndexError:
            return False
        except Exception:   # another complaint once the index is in range: cured
            return True
        return True

    what = f"IndexError: {exc}"
    at = "[..., " if vectorized else "["

    def reads(var: str) -> str:
        return f" reads {var} beyond its size" if index is None else \
            f" reads {var}{at}{index}]"

    if which != "T" and cured(z, longer(theta)):
        M = theta.shape[-1]
        least = "more" if index is None else f"at least {max(index + 1, -index)}"
        if M == 0:
            head = (f"`{control}` is required: `{name}`{reads('theta')} ({what}), but no "
                    f"control was given (theta has size M = 0)")
        else:
            head = f"`{control}` has M = {M} value(s), but `{name}`{reads('theta')} ({what})"
        return ValueError(f"{head}: pass a control with {least} value(s), e.g. "
                          f"control=invimbed.Constant([...]), or fix `{name}`")
    if cured(longer(z), theta):
        N = z.shape[-1]
        least = "a longer x" if index is None else \
            f"an x of length at least {max(index + 1, -index)}"
        return ValueError(f"`x` has N = {N} entries, but `{name}`{reads('z')} ({what}): "
                          f"pass {least}, or fix `{name}`")
    return exc
