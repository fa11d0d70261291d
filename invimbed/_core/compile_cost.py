"""Whether a numba kernel is ready to run without compiling (docs/performance.md,
"Compiled kernels and the first run on a machine").

The package's generic numba kernels (the Taylor tape's interpreter, the jet closure's
truncated contraction) are compiled once per machine and kept in numba's on-disk cache.
Compiling them costs far more than a short solve (43 s of CPU for the tape kernel, 1.5 s
for the contraction, on the shared 2-core container), so the paths that can run without
them (numpy evaluators computing the same sums) use a kernel only where it is `ready`,
or where the work is large enough that compiling it pays (each caller's threshold).
"""

from __future__ import annotations

from typing import Any

_ON_DISK: dict[int, bool] = {}


def ready(kernel: Any) -> bool:
    """Whether calling the numba dispatcher ``kernel`` compiles nothing: it was compiled
    in this process, or numba's on-disk cache holds machine code of it for this source
    (checked once per process; an unreadable cache counts as empty)."""
    if getattr(kernel, "signatures", None):
        return True
    key = id(kernel)
    hit = _ON_DISK.get(key)
    if hit is None:
        try:    # numba's cache index: empty, or missing, until a compilation wrote it
            hit = bool(kernel._cache._cache_file._load_index())
        except Exception:   # noqa: BLE001 - a numba without this layout: not known ready
            hit = False
        _ON_DISK[key] = hit
    return hit
