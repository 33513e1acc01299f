#!/usr/bin/env bash
# Builds the Kueue manager (sigs.k8s.io/kueue/cmd/kueue) from the wrapper module kueuebin into the same cache
# as build.sh, keyed by the Kueue and Go versions. A cache hit builds nothing. Prints the binary's path on
# stdout (last line). The integration tests that run Kueue call this; it takes many minutes on 2 cores.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/kueuebin"
KUEUE=$(awk '$1=="sigs.k8s.io/kueue" && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod")
OUT="${AUTOSCALER_TESTENV_CACHE:-$HOME/.cache/elastic-autoscaler}/kueue-$KUEUE-$(go env GOVERSION)"
if [ -x "$OUT/kueue" ]; then
  echo "$OUT/kueue"; exit 0
fi
mkdir -p "$OUT.tmp"
cd "$MOD"
export CGO_ENABLED=0
start=$(date +%s)
# Kueue's Makefile stamps its version the same way; the manager logs it at start.
nice -n 10 go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE" \
  -o "$OUT.tmp/kueue" sigs.k8s.io/kueue/cmd/kueue >&2
echo "build-kueue.sh: kueue $KUEUE built in $(( $(date +%s) - start ))s" >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "$OUT/kueue"
