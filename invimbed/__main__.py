"""Command line: ``python -m invimbed <command>`` (or the ``invimbed`` console script).

Commands
--------
demo
    Solve the projectile of the paper's Figure 1 by imbedding and by the adjoint
    method, print the comparison table, optionally plot it (see `invimbed._demo`).
compile
    Compile every numba kernel of the package once (or load it from numba's on-disk
    cache) and print the time each took and the total (see `invimbed._backends._warm`);
    ``--dry-run`` lists the kernels, where numba caches them and their expected compile
    time, without compiling.

Each command is a subparser with a ``handler`` default; add a command by writing an
``_add_<name>`` function that registers its subparser and a ``_run_<name>(args) -> int``
handler, and calling it from `build_parser`.

Exit codes: 0 success, 1 a numerical failure (a solver failed or the results disagree),
2 a usage error (bad option or value; argparse's convention).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from . import __version__

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

DEMO_SECONDS_PER_DEPTH = 0.01
"""CPU time of the demo per depth, almost all of it in the per-depth adjoint loop (one
forward and one backward scipy solve per depth): measured 8 to 10 ms at 21 to 200 depths
on a shared 2-core container (``time.process_time``)."""

DEMO_MAX_DEPTHS = 500
"""The most depths ``demo --depths`` takes: about 5 s of work at
`DEMO_SECONDS_PER_DEPTH`; more would run for minutes without a word."""

DEMO_AGREEMENT = 1e-6
"""Largest ``|a - b| / max(1, |b|)`` the demo accepts between imbedding, adjoint and closed
form (its solves run at ``rtol = 1e-8``; the observed differences are about ``1e-10``)."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2 (q and one deeper depth), "
                                         f"got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
    return value


def _add_demo(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help="solve the projectile of the paper's Figure 1 and compare with the adjoint method",
        description=(
            "Solve the projectile z = [h, v], dz/dt = [v, -g] (g = 9.81, q = 1, terminal "
            "loss T = (h - h_target)^2 / 2) at many depths p in one imbedding sweep, compare "
            "with the classical adjoint method (one forward and backward solve per depth) "
            "and with the closed form h(q) = h0 + v0 s - g s^2/2, s = q - p."
        ),
    )
    demo.add_argument("--depths", type=_positive_int, default=21, metavar="N",
                      help=f"number of depths, evenly spaced from q = 1 down to --p-min "
                           f"(default: 21, at most {DEMO_MAX_DEPTHS}: each costs about "
                           f"{1e3 * DEMO_SECONDS_PER_DEPTH:g} ms)")
    demo.add_argument("--p-min", type=_finite_float, default=-1.0, metavar="P",
                      help="deepest depth, below q = 1 (default: -1)")
    demo.add_argument("--closure", choices=("jet", "stencil", "crop"), default="jet",
                      help="closure of the imbedding sweep (default: jet); all three are "
                           "exact for this affine problem")
    demo.add_argument("--v0", type=_finite_float, default=10.0,
                      help="initial upward speed in m/s (default: 10)")
    demo.add_argument("--h-target", type=_finite_float, default=5.0, metavar="H",
                      help="target height of the terminal loss in m (default: 5)")
    demo.add_argument("--rtol", type=_positive_float, default=1e-8,
                      help="relative tolerance of both solvers (default: 1e-8)")
    demo.add_argument("--atol", type=_positive_float, default=1e-10,
                      help="absolute tolerance of both solvers (default: 1e-10)")
    demo.add_argument("--plot", metavar="FILE",
                      help="write a figure of h(q) and v(q) against p to FILE (format from "
                           "the extension, e.g. demo.png); needs matplotlib "
                           "(pip install invimbed[plot])")
    demo.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from ._demo import plot_projectile, run_projectile

    prog = "invimbed demo"
    if args.p_min >= 1.0:
        return _fail(prog, f"--p-min must be below q = 1, got {args.p_min:g}", EXIT_USAGE)
    if args.depths > DEMO_MAX_DEPTHS:
        seconds = args.depths * DEMO_SECONDS_PER_DEPTH
        return _fail(prog, f"--depths {args.depths} is above the demo's limit of "
                           f"{DEMO_MAX_DEPTHS} (about {seconds:.0f} s of work at "
                           f"{1e3 * DEMO_SECONDS_PER_DEPTH:g} ms a depth, most of it in the "
                           f"per-depth adjoint loop); use --depths {DEMO_MAX_DEPTHS} or fewer, "
                           f"or call invimbed.solve_imbedding / invimbed.solve_adjoint from "
                           f"Python for many depths", EXIT_USAGE)
    if args.plot:
        try:  # fail before computing rather than after
            importlib.import_module("matplotlib")
        except ImportError:
            return _fail(prog, "--plot needs matplotlib, which is not installed; install it "
                               "with `pip install invimbed[plot]`")
    try:
        demo = run_projectile(args.depths, p_min=args.p_min, v0=args.v0,
                              h_target=args.h_target, closure=args.closure,
                              rtol=args.rtol, atol=args.atol)
    except (TypeError, ValueError) as exc:
        return _fail(prog, str(exc), EXIT_USAGE)
    print(demo.report())
    if not demo.success:
        failed = demo.imbedding if not demo.imbedding.success else demo.adjoint
        return _fail(prog, f"a solver failed: {failed.message}")
    worst = demo.worst_relative_diff()
    if not worst <= DEMO_AGREEMENT:
        return _fail(prog, f"the imbedding, adjoint and closed form disagree: largest "
                           f"relative difference {worst:.2e} > {DEMO_AGREEMENT:g}")
    print(f"\nOK: imbedding, adjoint and closed form agree (largest relative difference "
          f"{worst:.1e} <= {DEMO_AGREEMENT:g}).")
    if args.plot:
        try:
            plot_projectile(demo, args.plot)
        except (ImportError, OSError, ValueError) as exc:
            return _fail(prog, f"could not write the plot {args.plot!r}: {exc}")
        print(f"wrote {args.plot}")
    return EXIT_OK


def _add_compile(commands: argparse._SubParsersAction) -> None:
    from ._core.runtime.compile_cost import KERNELS

    comp = commands.add_parser(
        "compile",
        help="compile every numba kernel once (minutes, once per machine) and print the "
             "time of each",
        description=(
            "Compile the package's numba kernels, so that the first compiled solve does "
            "not wait for them: each is compiled once per machine and cached on disk by "
            "numba (NUMBA_CACHE_DIR, or __pycache__ beside the sources); a kernel already "
            "cached is loaded. Prints the seconds each took and the total. Needs numba "
            "(pip install invimbed[numba])."),
    )
    comp.add_argument("--kernel", action="append", choices=tuple(KERNELS), metavar="NAME",
                      help=f"compile only this kernel (repeatable): one of "
                           f"{', '.join(KERNELS)} (default: all)")
    comp.add_argument("--dry-run", action="store_true",
                      help="list the kernels, whether numba's cache holds them, where, and "
                           "their expected compile time on this machine; compile nothing")
    comp.set_defaults(handler=_run_compile)


def _run_compile(args: argparse.Namespace) -> int:
    prog = "invimbed compile"
    try:
        importlib.import_module("numba")
    except ImportError:
        return _fail(prog, "the kernels are numba's, which is not installed; install it with "
                           "`pip install invimbed[numba]`")
    from ._backends._warm import representative, warm
    from ._core.runtime.compile_cost import KERNELS, cache_directory, expected_seconds, ready

    names = args.kernel or list(KERNELS)
    width = max(map(len, names))
    if args.dry_run:
        for name in names:
            disp = representative(name)
            where = cache_directory(disp)
            seconds, basis = expected_seconds(name, where)
            state = "cached" if ready(disp) else "not cached"
            print(f"{name:<{width}}  {state:<10}  expected {seconds:7.1f} s ({basis}); "
                  f"cache: {where}")
        return EXIT_OK
    total = [0.0, 0.0]
    print(f"{'kernel':<{width}}  {'wall':>8}  {'CPU':>8}", flush=True)
    for name in names:
        try:
            wall, cpu, compiled = warm(name)
        except Exception as exc:  # noqa: BLE001 - say which kernel, then numba's reason
            return _fail(prog, f"kernel {name} failed: {type(exc).__name__}: {exc}")
        total[0] += wall
        total[1] += cpu
        how = "compiled" if compiled else "loaded from the cache"
        print(f"{name:<{width}}  {wall:6.1f} s  {cpu:6.1f} s  {how}", flush=True)
    print(f"{'total':<{width}}  {total[0]:6.1f} s  {total[1]:6.1f} s")
    return EXIT_OK


def _fail(prog: str, message: str, code: int = EXIT_FAILURE) -> int:
    sys.stdout.flush()
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="invimbed",
        description="invimbed: Bolza optimal-control problems by invariant imbedding.",
    )
    parser.add_argument("--version", action="version", version=f"invimbed {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="<command>")
    _add_demo(commands)
    _add_compile(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return the exit code.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments without the program name; ``sys.argv[1:]`` when omitted.

    Returns
    -------
    int
        0 on success, 1 on a numerical failure, 2 on a usage error. Usage errors (and
        ``--help``) print argparse's message and return its code instead of raising
        `SystemExit`, so that ``main`` can be called in-process.

    Examples
    --------
    >>> from invimbed.__main__ import main
    >>> main(["demo", "--depths", "5"])  # doctest: +SKIP
    0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help, --version or a usage error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_usage(sys.stderr)
        print("invimbed: error: a command is required (e.g. `invimbed demo`)", file=sys.stderr)
        return EXIT_USAGE
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
