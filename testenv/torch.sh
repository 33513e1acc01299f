#!/usr/bin/env bash
# Builds the training environment the process node agent runs pod containers with: a virtualenv
# holding CPU-usable PyTorch, the training helper's one dependency and torchft, cached outside the
# repository and keyed by the versions, like the Kubernetes binaries. A cache hit installs nothing.
# The package registry serves only torch's CUDA build for Linux x86_64 (the CPU-only wheels live on
# PyTorch's own index, which is not reachable here); it runs on CPU with gloo, it is just large.
# Prints the environment's directory on stdout (last line).
set -euo pipefail
TORCH=2.15.0
PROM=0.26.0
NUMPY=2.4.6  # torch warns at import without it
# torchft mode's library (the `torchft` extra of pyproject.toml, same version) and what it pulls,
# pinned: it is added to an existing environment without reinstalling torch.
TORCHFT=(torchft==0.2.0 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2
  opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2
  opentelemetry-proto==1.45.2 opentelemetry-semantic-conventions==0.66b2 protobuf==7.36.2
  googleapis-common-protos==1.76.0 requests==2.34.2 urllib3==2.8.0 idna==3.20
  certifi==2026.10.19.post1 charset-normalizer==3.5.3)
TORCHFT_STAMP=".${TORCHFT[0]}"
# The goodput core's step-time fit (the `autoscaler.goodput` package) needs scipy, added likewise.
SCIPY=scipy==1.17.1
SCIPY_STAMP=".$SCIPY"
PY=${PYTHON:-python3.11}
OUT="${AUTOSCALER_TESTENV_CACHE:-$HOME/.cache/elastic-autoscaler}/train-torch-$TORCH-$($PY -c 'import sys; print("py%d.%d" % sys.version_info[:2])')"
add_torchft() {
  "$OUT/bin/pip" install --quiet --disable-pip-version-check "${TORCHFT[@]}" >&2
  "$OUT/bin/python" -c 'import torchft' >&2
  touch "$OUT/$TORCHFT_STAMP"
}
add_scipy() {
  "$OUT/bin/pip" install --quiet --disable-pip-version-check "$SCIPY" >&2
  "$OUT/bin/python" -c 'import scipy.optimize' >&2
  touch "$OUT/$SCIPY_STAMP"
}
if [ -x "$OUT/bin/torchrun" ] && [ -f "$OUT/.complete" ]; then
  [ -f "$OUT/$TORCHFT_STAMP" ] || add_torchft
  [ -f "$OUT/$SCIPY_STAMP" ] || add_scipy
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
add_torchft
add_scipy
touch "$OUT/.complete"
echo "torch.sh: torch $TORCH installed in $(( $(date +%s) - start ))s, $(du -sm "$OUT" | cut -f1) MB" >&2
echo "$OUT"
