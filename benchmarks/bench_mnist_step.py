"""Where a rotating-MNIST training step goes, and what makes it faster on the CPU.

One Adam step of the paper's model (``LatentInImNet``, p_min = -4, n = 2, cropped
Jacobians, 16 base filters, batch 25 x 16 frames of 28 x 28, as
``python -m invimbed.experiments rotating-mnist``), timed in variants interleaved round
by round in this one process, so that load from other processes falls on all alike:

- ``plain``: the model as built, one torch thread (what the experiments run);
- ``channels-last-transposed``: the decoder's two stride-1 transposed convolutions (the
  ones faster alone in that layout) channels-last, their outputs made contiguous again;
- ``all-channels-last``: the whole model in the channels-last layout (faster, but the
  CPU's channels-last batch norm is less accurate: its error against float64 is printed,
  which is why the experiments do not use it);
- ``2 threads``: ``plain`` with ``torch.set_num_threads(2)``;
- ``compile`` (with ``--compile``): ``torch.compile`` of the encoder and decoder, its
  compile time printed apart.

Then a ``torch.profiler`` table of one plain step (``--profile``). Prints the median
seconds per step of each variant and its ratio to ``plain``, in wall time and in the
CPU time of this process (``time.process_time``: on a shared machine the fairer measure
of the one-thread variants, since waiting for a core is not counted; the two-thread
variant's CPU time sums both threads).

    python benchmarks/bench_mnist_step.py                # ~1-2 min on an idle 2-core machine
    python benchmarks/bench_mnist_step.py --repeats 3 --profile --compile
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

from _machine import arguments, header
from invimbed.experiments._models import LatentInImNet, mnist_decoder, mnist_encoder
from invimbed.experiments._runner import masked_mse


def model() -> LatentInImNet:
    torch.manual_seed(0)
    return LatentInImNet(mnist_encoder(20, 16), mnist_decoder(20, 16), 20, p_min=-4,
                         hidden_layers=2, inflation=2, dropout=0.3, closure="crop")


def channels_last_transposed(m: torch.nn.Module) -> torch.nn.Module:
    for mod in m.modules():
        if isinstance(mod, torch.nn.ConvTranspose2d) and tuple(mod.stride) == (1, 1):
            mod.to(memory_format=torch.channels_last)
            mod.register_forward_hook(lambda _m, _i, out: out.contiguous())
    return m


def batch_norm_error() -> tuple[float, float]:
    """Largest error against float64 of the decoder's last batch norm (32 channels,
    28 x 28, 400 images), contiguous and channels-last."""
    g = torch.Generator().manual_seed(0)
    bn = torch.nn.BatchNorm2d(32)
    x = torch.relu(torch.randn(400, 32, 28, 28, generator=g)) * 3 + 1
    ref = bn.double()(x.double())
    bn = bn.float()
    with torch.no_grad():
        a = bn(x)
        b = bn(x.contiguous(memory_format=torch.channels_last))
    return float((a - ref).abs().max()), float((b - ref).abs().max())


def main(argv=None):
    ap = arguments(__doc__, repeats=5, aliases=("--rounds",),
                   repeats_help="rounds of the variants in alternation, the median of each "
                                "kept (default 5; --rounds is the same)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--profile", action="store_true", help="print a profile of one step")
    args = ap.parse_args(argv)
    print(header("torch", argv=argv))
    g = torch.Generator().manual_seed(1)
    y = torch.rand(25, 16, 28, 28, generator=g)
    x0, times = y[:, :1].clone(), torch.arange(16.0)
    mask = torch.rand(25, 16, generator=g) > 0.25
    base = model()
    variants = {"plain": (copy.deepcopy(base), 1),
                "channels-last-transposed": (channels_last_transposed(copy.deepcopy(base)), 1),
                "all-channels-last": (copy.deepcopy(base).to(memory_format=torch.channels_last),
                                      1),
                "2 threads": (copy.deepcopy(base), 2)}
    if args.compile:
        m = copy.deepcopy(base)
        m.encoder, m.decoder = torch.compile(m.encoder), torch.compile(m.decoder)
        variants["compile"] = (m, 1)
    opts = {k: torch.optim.Adam(m.parameters(), 1e-3) for k, (m, _) in variants.items()}

    def step(name: str) -> tuple[float, float]:
        m, threads = variants[name]
        torch.set_num_threads(threads)
        torch.manual_seed(3)
        t0, c0 = time.perf_counter(), time.process_time()
        opts[name].zero_grad(set_to_none=True)
        loss = masked_mse(m(x0, times), y, mask)
        loss.backward()
        opts[name].step()
        return time.perf_counter() - t0, time.process_time() - c0

    for name in variants:                          # warm-up (and the compilation)
        print(f"first step {name:<26} {step(name)[0]:8.2f} s", flush=True)
    spent = {k: [] for k in variants}
    for _ in range(args.repeats):
        for name in variants:
            spent[name].append(step(name))
    wall = {k: statistics.median(w for w, _ in v) for k, v in spent.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in spent.items()}
    print(f"\n{'variant':<26} {'wall s':>8} {'x plain':>8} {'CPU s':>8} {'x plain':>8}"
          f"   (medians of {args.repeats} steps)")
    for name in variants:
        print(f"{name:<26} {wall[name]:8.3f} {wall[name] / wall['plain']:8.2f} "
              f"{cpu[name]:8.3f} {cpu[name] / cpu['plain']:8.2f}")
    a, b = batch_norm_error()
    print(f"\nbatch norm (32 x 28 x 28, 400 images), largest error against float64: "
          f"contiguous {a:.1e}, channels-last {b:.1e}")
    if args.profile:
        from torch.profiler import profile

        with profile() as prof:
            step("plain")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
