#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the wrapper module for a Kubernetes release (one-off, by a developer).
set -euo pipefail
K8S=${K8S:-v1.36.3}; STG=${STG:-v0.${K8S#v1.}}
cd "$(dirname "$0")"
rm -f go.mod go.sum
go mod init github.com/elastic-pytorch/autoscaler/testenv/k8sbin
KMOD=$(go mod download -json k8s.io/kubernetes@$K8S | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
for m in $(awk '$2=="=>" && $3 ~ /^\.\/staging\/src\// {print $1}' "$KMOD"); do go mod edit -replace="$m=$m@$STG"; done
ETCD=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$KMOD")
GODEBUG_LINE=$(grep -E '^godebug' "$KMOD" || true)
go get -tool k8s.io/kubernetes/cmd/kube-apiserver@$K8S k8s.io/kubernetes/cmd/kube-controller-manager@$K8S k8s.io/kubernetes/cmd/kubectl@$K8S
go get -tool go.etcd.io/etcd/server/v3@$ETCD
if [ -n "$GODEBUG_LINE" ]; then echo "$GODEBUG_LINE" >> go.mod; fi
go mod tidy
