#!/usr/bin/env bash
# Two-worker data-parallel training (MultiWorkerMirroredStrategy) on this machine.
#
# Run:
#     bash examples/multi_worker.sh runs/multi-worker
#
# Expect (measured on 2 shared CPU cores, about a minute): each worker prints its rank,
# one line per epoch (loss and accuracy, the same on both: they are all-reduced) and the
# test accuracy of the `micro` model after 40 steps (0.231: a demonstration of the
# plumbing, not a training recipe); worker 0 writes metrics.json and model.keras to
# runs/multi-worker, and worker-0/final.weights.h5 and worker-1/final.weights.h5 hold
# identical weights (checked at the end). On several machines, give each the same
# cluster with its own "index" and run the same keras-vit command.
set -euo pipefail
OUT=${1:-runs/multi-worker}
PY=${PY:-.venv/bin/python}
read -r P0 P1 < <($PY -c "import socket
s = [socket.socket() for _ in range(2)]
[x.bind(('localhost', 0)) for x in s]
print(*[x.getsockname()[1] for x in s])")
pids=()
for i in 0 1; do
  TF_CONFIG="{\"cluster\": {\"worker\": [\"localhost:$P0\", \"localhost:$P1\"]}, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
    $PY -m keras_vit.cli train --strategy multi-worker --model micro --epochs 2 --steps-per-epoch 20 \
    --batch-size 64 --progress 2 --output "$OUT" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
$PY - "$OUT" <<'PY'
import sys
import numpy as np
from keras_vit.train import recipes
out = sys.argv[1]
weights = []
for i in range(2):
    model = recipes.build_model("micro", 10)
    model.load_weights(f"{out}/worker-{i}/final.weights.h5")
    weights.append(model.get_weights())
same = all(np.array_equal(a, b) for a, b in zip(*weights))
print("workers hold identical weights:", same)
sys.exit(0 if same else 1)
PY
