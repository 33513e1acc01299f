#!/usr/bin/env bash
# Builds upstream's operator, the Kubeflow training operator's manager
# (github.com/kubeflow/training-operator/cmd/training-operator.v1), from the wrapper module
# trainingoperatorbin into the same cache as build.sh, keyed by its and Go's versions. A cache hit
# builds nothing. Prints the binary's path on stdout (last line).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/trainingoperatorbin"
VERSION=$(awk '$1=="github.com/kubeflow/training-operator" && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod")
OUT="${AUTOSCALER_TESTENV_CACHE:-$HOME/.cache/elastic-autoscaler}/training-operator-$VERSION-$(go env GOVERSION)"
if [ -x "$OUT/training-operator" ]; then
  echo "$OUT/training-operator"; exit 0
fi
mkdir -p "$OUT.tmp"
cd "$MOD"
export CGO_ENABLED=0
start=$(date +%s)
nice -n 10 go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/training-operator" \
  github.com/kubeflow/training-operator/cmd/training-operator.v1 >&2
echo "build-training-operator.sh: training-operator $VERSION built in $(( $(date +%s) - start ))s" >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "$OUT/training-operator"
