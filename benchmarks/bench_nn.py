"""InImNet's nested Jacobians: time and peak memory of one training step (forward and
backward) against depth, and matrix-free against materialised Jacobian products.

    pip install torch==2.13.0 && pip install -e ".[nn]"
    python benchmarks/bench_nn.py            # about 15 minutes on 2 busy CPU cores
    python benchmarks/bench_nn.py --quick    # fewer depths, a 16 x 16 image (about 3 minutes)
    python benchmarks/bench_nn.py --device cuda

Two tables:

1. **depth**: an MLP ``Phi`` (the paper's, ``n = 2`` layers, inflation 2) on ``dim = 21``
   (the rotating-MNIST latent plus time), batch 25, ``p_min = -1 ... -L``, for
   ``closure="exact"`` (autograd and adjoint backward), ``"jet"``, ``"crop"``.
2. **matrix-free**: a convolutional ``Phi`` on 4 x 32 x 32 images (``dim = 4096``, the
   paper's convolutional model's input size), batch 2, ``p_min = -2``, ``"crop"``, with
   Jacobian-vector products (default) and with ``materialize=True``.

Each case runs in a fresh process: the time is the best of ``--repeats`` steps after one
warm-up step, the memory the peak resident set size during the timed steps above the
size before them (CPU, Linux; on CUDA ``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import resource
import time


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _reset_peak() -> bool:
    """Reset the kernel's peak resident set size (Linux >= 4.0); False if unavailable."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _case(spec: dict, queue) -> None:
    import torch

    from invimbed.nn import InImNet

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    dev = torch.device(spec["device"])
    if spec["kind"] == "mlp":
        net = InImNet(spec["dim"], p_min=-spec["L"], closure=spec["jacobian"],
                      backward=spec["backward"], materialize=spec["materialize"])
    else:
        side = spec["side"]

        class Conv(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Sequential(
                    torch.nn.Conv2d(4, 16, 5, padding=2), torch.nn.Tanh(),
                    torch.nn.Conv2d(16, 4, 5, padding=2))

            def forward(self, x):
                return self.net(x.reshape(-1, 4, side, side)).reshape(x.shape[0], -1)

        net = InImNet(4 * side * side, p_min=-spec["L"], closure=spec["jacobian"],
                      backward=spec["backward"], materialize=spec["materialize"],
                      phi=lambda i: Conv())
    net = net.to(dev)
    x = torch.randn(spec["batch"], net.dim, device=dev)

    def step():
        net.zero_grad()
        (net(x)[-1] ** 2).mean().backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    step()                                    # warm-up (torch loads its decompositions)
    gc.collect()
    _reset_peak()
    base = _rss_mb()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(spec["repeats"]):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    if dev.type == "cuda":
        mem = torch.cuda.max_memory_allocated() / 2**20
    else:
        mem = _peak_mb() - base
    queue.put({"time_s": min(times), "peak_mb": mem})


def run(spec: dict) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_case, args=(spec, queue))
    proc.start()
    proc.join()
    return queue.get() if proc.exitcode == 0 else {"time_s": float("nan"), "peak_mb": float("nan")}


def main() -> None:
    from _machine import arguments, header, write_json   # not in the measured children

    ap = arguments(__doc__, quick="fewer depths, batch sizes and widths", repeats=3,
                   json_out=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: the steps are small, and several threads "
                         "spin-wait badly on a busy machine)")
    args = ap.parse_args()
    common = {"device": args.device, "repeats": args.repeats, "threads": args.threads,
              "materialize": False}
    print(header("torch"))
    rows = []
    print("1. depth: MLP Phi, dim 21, batch 25 -- seconds per step, peak MB")
    modes = [("exact", "autograd"), ("exact", "adjoint"), ("jet", "autograd"),
             ("crop", "autograd")]
    depths = [1, 2, 4, 6] if args.quick else [1, 2, 3, 4, 5, 6, 8]
    print(f"{'L':>3} " + " ".join(f"{j + '/' + b:>22}" for j, b in modes))
    for L in depths:
        cells = []
        for j, b in modes:
            if j == "exact" and L > 6:
                cells.append(f"{'(exponential: skipped)':>22}")
                continue
            r = run({**common, "kind": "mlp", "dim": 21, "batch": 25, "L": L,
                     "jacobian": j, "backward": b})
            rows.append({"table": "depth", "L": L, "jacobian": j, "backward": b, **r})
            cells.append(f"{r['time_s']:>12.4f} {r['peak_mb']:>8.1f}M")
        print(f"{L:>3} " + " ".join(cells))
    side = 16 if args.quick else 32
    print(f"\n2. matrix-free: conv Phi, dim {4 * side * side}, batch 2, p_min = -2, crop")
    for mat in (False, True):
        r = run({**common, "kind": "conv", "side": side, "batch": 2, "L": 2,
                 "jacobian": "crop", "backward": "autograd", "materialize": mat})
        rows.append({"table": "matrix-free", "dim": 4 * side * side, "materialize": mat, **r})
        name = "materialize=True " if mat else "Jacobian-vector  "
        print(f"{name} {r['time_s']:>10.4f} s {r['peak_mb']:>10.1f} MB")
    write_json(args.json, rows, "torch")


if __name__ == "__main__":
    main()
