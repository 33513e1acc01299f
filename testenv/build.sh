#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and etcd from the wrapper module into a cache
# outside the repository, keyed by the Kubernetes and Go versions. A cache hit builds nothing.
# Prints the cache directory on stdout (last line).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/k8sbin"
version_of() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod"; }
K8S=$(version_of k8s.io/kubernetes)
ETCD=$(version_of go.etcd.io/etcd/server/v3)
MINOR=$(echo "$K8S" | cut -d. -f2)
OUT="${AUTOSCALER_TESTENV_CACHE:-$HOME/.cache/elastic-autoscaler}/k8s-$K8S-etcd-$ETCD-$(go env GOVERSION)"
if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kube-controller-manager" ] && [ -x "$OUT/kube-scheduler" ] && [ -x "$OUT/etcd" ]; then
  echo "$OUT"; exit 0
fi
avail_kb=$(df -Pk "$HOME" | awk 'NR==2{print $4}')
if [ "$avail_kb" -lt 6000000 ]; then
  echo "build.sh: need ~6 GB free for the Kubernetes build, have $((avail_kb/1024)) MB" >&2; exit 1
fi
mkdir -p "$OUT.tmp"
cd "$MOD"
export CGO_ENABLED=0
V="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$K8S -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$MINOR"
TAGS=selinux,notest,grpcnotrace
start=$(date +%s)
go build -trimpath -tags=$TAGS -ldflags "-s -w $V" -o "$OUT.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
echo "build.sh: kube-apiserver built in $(( $(date +%s) - start ))s" >&2
go build -trimpath -tags=$TAGS -ldflags "-s -w $V" -o "$OUT.tmp/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager >&2
echo "build.sh: kube-controller-manager built at $(( $(date +%s) - start ))s" >&2
go build -trimpath -tags=$TAGS -ldflags "-s -w $V" -o "$OUT.tmp/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler >&2
echo "build.sh: kube-scheduler built at $(( $(date +%s) - start ))s" >&2
go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" go.etcd.io/etcd/server/v3 >&2
echo "build.sh: etcd built at $(( $(date +%s) - start ))s" >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "$OUT"
