#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the scheduler-plugins wrapper module (one-off, by a developer):
# the scheduler of release $SP with that release's own replace lines, i.e. the Kubernetes
# libraries it was released against (v0.34.7: Kubernetes 1.34.7). It does not compile against
# the 1.36 libraries of testenv/k8sbin: the scheduler framework's interfaces moved ("undefined:
# framework.Handle" in pkg/noderesources, pkg/podstate, ...) and controller-runtime v0.22.3's
# informer handles lack client-go 1.36's HasSyncedChecker.
set -euo pipefail
SP=${SP:-v0.34.7}
cd "$(dirname "$0")"
rm -f go.mod go.sum
go mod init github.com/elastic-pytorch/autoscaler/testenv/gangbin/scheduler-plugins
SPMOD=$(go mod download -json "sigs.k8s.io/scheduler-plugins@$SP" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
awk '$2=="=>" && $3 !~ /^\./ {print $1, $3, $4}' "$SPMOD" | while read -r module target version; do
  go mod edit -replace="$module=$target@$version"
done
# The Go module proxy reachable here refuses these staging modules at the release's version
# (403 "This module version is not available", or no checksum), and k8s.io/externaljwt has no
# replace line in the release. All but csi-translation-lib are only read for the module graph,
# not built into the scheduler; they take testenv/k8sbin's version.
STAGING=$(awk '$1=="replace" && $2=="k8s.io/api" {print $5}' ../../k8sbin/go.mod)
for module in cluster-bootstrap cri-client csi-translation-lib endpointslice externaljwt \
  kube-aggregator kube-controller-manager kube-proxy pod-security-admission sample-apiserver; do
  go mod edit -replace="k8s.io/$module=k8s.io/$module@$STAGING"
done
go get -tool "sigs.k8s.io/scheduler-plugins/cmd/scheduler@$SP"
go mod tidy
