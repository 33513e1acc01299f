#!/usr/bin/env bash
# Builds the training environment the process node agent runs pod containers with: a virtualenv
# holding CPU-usable PyTorch and the training helper's one dependency, cached outside the
# repository and keyed by the versions, like the Kubernetes binaries. A cache hit installs nothing.
# The package registry serves only torch's CUDA build for Linux x86_64 (the CPU-only wheels live on
# PyTorch's own index, which is not reachable here); it runs on CPU with gloo, it is just large.
# Prints the environment's directory on stdout (last line).
set -euo pipefail
TORCH=2.15.0
PROM=0.26.0
NUMPY=2.4.6  # torch warns at import without it
PY=${PYTHON:-python3.11}
OUT="${AUTOSCALER_TESTENV_CACHE:-$HOME/.cache/elastic-autoscaler}/train-torch-$TORCH-$($PY -c 'import sys; print("py%d.%d" % sys.version_info[:2])')"
if [ -x "$OUT/bin/torchrun" ] && [ -f "$OUT/.complete" ]; then
  echo "$OUT"; exit 0
fi
avail_kb=$(df -Pk "$HOME" | awk 'NR==2{print $4}')
if [ "$avail_kb" -lt 8000000 ]; then
  echo "torch.sh: need ~8 GB free for PyTorch, have $((avail_kb/1024)) MB" >&2; exit 1
fi
start=$(date +%s)
rm -rf "$OUT"
$PY -m venv "$OUT"
"$OUT/bin/pip" install --quiet --disable-pip-version-check "torch==$TORCH" "prometheus-client==$PROM" "numpy==$NUMPY" >&2
"$OUT/bin/python" -c 'import torch, torch.distributed as d; assert d.is_gloo_available()' >&2
touch "$OUT/.complete"
echo "torch.sh: torch $TORCH installed in $(( $(date +%s) - start ))s, $(du -sm "$OUT" | cut -f1) MB" >&2
echo "$OUT"
