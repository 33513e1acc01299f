#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd from the wrapper module into
# a cache outside the repository, keyed by the Kubernetes and Go versions. Each binary is checked on its own, so
# a cache made before a binary was added to this list only builds the missing one.
# Prints the cache directory on stdout (last line).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/k8sbin"
version_of() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod"; }
K8S=$(version_of k8s.io/kubernetes)
ETCD=$(version_of go.etcd.io/etcd/server/v3)
MINOR=$(echo "$K8S" | cut -d. -f2)
OUT="${AUTOSCALER_TESTENV_CACHE:-$HOME/.cache/elastic-autoscaler}/k8s-$K8S-etcd-$ETCD-$(go env GOVERSION)"
# name=package; kubectl is linked with the same version stamp as the server binaries, so `kubectl version`
# reports the pinned release.
KUBE_BINARIES=(
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler
  kubectl=k8s.io/kubernetes/cmd/kubectl
)
ETCD_PKG=go.etcd.io/etcd/server/v3

missing=()
for entry in "${KUBE_BINARIES[@]}" "etcd=$ETCD_PKG"; do
  [ -x "$OUT/${entry%%=*}" ] || missing+=("$entry")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "$OUT"; exit 0
fi
avail_kb=$(df -Pk "$HOME" | awk 'NR==2{print $4}')
if [ "$avail_kb" -lt 6000000 ]; then
  echo "build.sh: need ~6 GB free for the Kubernetes build, have $((avail_kb/1024)) MB" >&2; exit 1
fi
mkdir -p "$OUT"
cd "$MOD"
export CGO_ENABLED=0
V="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$K8S -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$MINOR"
TAGS=selinux,notest,grpcnotrace
start=$(date +%s)
for entry in "${missing[@]}"; do
  name=${entry%%=*}; pkg=${entry#*=}
  if [ "$pkg" = "$ETCD_PKG" ]; then
    flags=(-ldflags "-s -w")
  else
    flags=(-tags=$TAGS -ldflags "-s -w $V")
  fi
  # Build beside the target and rename, so an interrupted build never leaves a half-written binary that
  # the per-binary check above would take for a finished one.
  go build -trimpath "${flags[@]}" -o "$OUT/.$name.tmp" "$pkg" >&2
  mv "$OUT/.$name.tmp" "$OUT/$name"
  echo "build.sh: $name built at $(( $(date +%s) - start ))s" >&2
done
echo "$OUT"
