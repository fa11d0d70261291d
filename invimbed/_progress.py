"""Progress display of the iterative applications (optimisation, training)."""

from __future__ import annotations

import sys


class ProgressBar:
    """tqdm when installed, otherwise a line on stderr every ``every`` iterations; or
    nothing when disabled."""

    def __init__(self, enabled: bool, total: int | None, desc: str, label: str = "J",
                 every: int = 1) -> None:
        self.enabled = bool(enabled)
        self.desc, self.label, self.every = desc, label, max(1, int(every))
        self.bar = None
        if not self.enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:  # optional dependency
            return
        self.bar = tqdm(total=total, desc=desc, unit="it")

    def update(self, nit: int, value: float) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix({self.label: f"{value:.6g}"})
        elif nit % self.every == 0 or nit == 1:
            print(f"{self.desc}: iteration {nit}, {self.label} = {value:.10g}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
