"""Two builds of IPOPT on the optimal-control gallery: same iterations, same times?

`solve_ocp` reaches IPOPT through ``cyipopt``, which comes either built against a system
IPOPT (``apt-get install coinor-libipopt-dev ...`` then ``pip install cyipopt``) or as
the ``cyipopt-wheels`` manylinux wheel that bundles IPOPT and MUMPS (the ``ipopt``
extra: ``pip install ".[ipopt]"``). The two cannot share one environment (both install
the ``cyipopt`` package), so each side runs in its own interpreter: this one, and the
one given by ``--other`` (a virtual environment with the other build; invimbed is
imported from this checkout by both).

Each gallery problem (examples/ocp_*.py, the grids of benchmarks/bench_ocp.py) is solved
by the example's own ``solve`` in a fresh process per side, the sides alternating,
``--repeats`` times each; printed per problem: IPOPT's iterations, J, and the best wall
time of each side with their ratio (the whole ``solve`` call, after an untimed one that
warms the imports and the derivative code).

Run:  python benchmarks/bench_ipopt_builds.py --other /tmp/venv-ipopt/bin/python
      [--quick] [--repeats R] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GALLERY = [("Rayleigh", "ocp_rayleigh", 100), ("Van der Pol", "ocp_vanderpol", 100),
           ("minimum time", "ocp_min_time", 100), ("Bryson-Denham", "ocp_bryson_denham", 100),
           ("LQ tracking", "ocp_lq_tracking", 40), ("hypersensitive", "ocp_hypersensitive", None)]


def child(name: str, K: int | None) -> None:
    """Solve one example (an untimed call, then a timed one) and print a JSON line."""
    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    import importlib

    import cyipopt

    ex = importlib.import_module(name)
    ex.solve(K) if K is not None else ex.solve()
    t0 = time.perf_counter()
    res = ex.solve(K) if K is not None else ex.solve()
    wall = time.perf_counter() - t0
    print(json.dumps({"nit": int(res.nit), "fun": float(res.fun), "wall": wall,
                      "success": bool(res.success), "cyipopt": cyipopt.__file__,
                      "version": getattr(cyipopt, "__version__", "?")}))


def run(python: str, name: str, K: int | None) -> dict:
    out = subprocess.run([python, __file__, "--child", name, str(K)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
    from _machine import arguments, header

    ap = arguments(__doc__, quick="K = 20 (the hypersensitive grid is fixed)", repeats=2)
    ap.add_argument("--other", help="the interpreter with the other cyipopt build")
    ap.add_argument("--only", default=None)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], None if args.child[1] == "None" else int(args.child[1]))
        return 0
    if not args.other:
        ap.error("--other is required")
    print(header("cyipopt"))
    sides = {"this": sys.executable, "other": args.other}
    print(f"interpreters: this = {sides['this']}, other = {sides['other']}")
    print(f"{'problem':15s} {'K':>4s}  {'iterations this / other':>24s}  {'J this':>13s}  "
          f"{'J other':>13s}  {'best s this':>11s}  {'best s other':>12s}  ratio")
    seen = False
    for label, name, K in GALLERY:
        if args.only and args.only.lower() not in label.lower():
            continue
        K = 20 if args.quick and K is not None else K
        got: dict[str, list] = {"this": [], "other": []}
        for _ in range(args.repeats):
            for side, python in sides.items():           # the sides in alternation
                got[side].append(run(python, name, K))
        a, b = got["this"][0], got["other"][0]
        ta, tb = (min(r["wall"] for r in got[s]) for s in ("this", "other"))
        print(f"{label:15s} {str(K or 164):>4s}  {a['nit']:>11d} / {b['nit']:<10d}  "
              f"{a['fun']:13.8f}  {b['fun']:13.8f}  {ta:11.2f}  {tb:12.2f}  {tb / ta:5.2f}"
              + ("" if a["success"] and b["success"] else "  (not success)"))
        for side in sides if not seen else ():
            print(f"    {side}: cyipopt {got[side][0]['version']} from "
                  f"{got[side][0]['cyipopt']}")
        seen = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
