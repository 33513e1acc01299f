#!/usr/bin/env bash
# Builds the scheduler-plugins scheduler (its Coscheduling plugin gang-schedules PodGroups of
# scheduling.x-k8s.io) from the wrapper module testenv/gangbin/scheduler-plugins (the release
# with the Kubernetes libraries it was released against: see gen.sh there) into the same cache
# as build.sh, keyed by the scheduler-plugins, Kubernetes and Go versions. A cache hit builds
# nothing. Prints the binary's path on stdout (last line).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/gangbin/scheduler-plugins"
version_of() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod"; }
replaced_by() { awk -v m="$1" '$1=="replace" && $2==m {print $5; exit}' "$MOD/go.mod"; }
SP=$(version_of sigs.k8s.io/scheduler-plugins)
K8S=$(replaced_by k8s.io/kubernetes)
MINOR=$(echo "$K8S" | cut -d. -f2)
OUT="${AUTOSCALER_TESTENV_CACHE:-$HOME/.cache/elastic-autoscaler}/scheduler-plugins-$SP-k8s-$K8S-$(go env GOVERSION)"
BIN="$OUT/scheduler-plugins-scheduler"
if [ -x "$BIN" ]; then
  echo "$BIN"; exit 0
fi
mkdir -p "$OUT.tmp"
cd "$MOD"
export CGO_ENABLED=0
# The Kubernetes version the libraries report, and build.sh's tags.
V="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR -X k8s.io/component-base/version.gitTreeState=clean"
start=$(date +%s)
nice -n 10 go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "-s -w $V" -o "$OUT.tmp/scheduler-plugins-scheduler" sigs.k8s.io/scheduler-plugins/cmd/scheduler >&2
echo "build-gang-scheduler.sh: scheduler-plugins $SP built in $(( $(date +%s) - start ))s" >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "$BIN"
