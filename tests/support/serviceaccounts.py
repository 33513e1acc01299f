"""Acting as a ServiceAccount: a token from the TokenRequest API, a kubeconfig that carries it,
and SelfSubjectAccessReviews asked with it (what `kubectl auth can-i` sends)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from autoscaler.clients.kube import Kube

TOKEN_SECONDS = 3600


def request_token(kube: Kube, namespace: str, name: str, *, seconds: int = TOKEN_SECONDS) -> str:
    """A bound token of an existing ServiceAccount (`kubectl create token`)."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    status = kube.request("POST", path, body=body)["status"]
    return str(status["token"])


def write_kubeconfig(path: Path, *, server: str, ca: Path, user: str, token: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "testenv", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "testenv", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class Access:
    """One question to the authorizer: may I `verb` `resource` (in `namespace`, "" = all)?"""

    verb: str
    resource: str  # "pytorchjobs.kubeflow.org/scale", "pods", "leases.coordination.k8s.io"
    namespace: str = ""

    def attributes(self) -> dict[str, str]:
        resource, _, subresource = self.resource.partition("/")
        plural, _, group = resource.partition(".")
        attributes = {"verb": self.verb, "group": group, "resource": plural}
        if subresource:
            attributes["subresource"] = subresource
        if self.namespace:
            attributes["namespace"] = self.namespace
        return attributes

    def __str__(self) -> str:
        where = f" -n {self.namespace}" if self.namespace else " (all namespaces)"
        return f"{self.verb} {self.resource}{where}"


def allowed(kube: Kube, access: Access) -> bool:
    """The API server's answer for the credentials of `kube` (a SelfSubjectAccessReview)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": access.attributes()},
    }
    answer = kube.request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review
    )
    return bool(answer["status"].get("allowed"))


def who_am_i(kube: Kube) -> str:
    """The user name the API server authenticated (a SelfSubjectReview)."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review)
    return str(answer["status"]["userInfo"]["username"])
