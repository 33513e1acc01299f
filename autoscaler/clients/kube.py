"""A small Kubernetes client over the `kubernetes` package, speaking plain JSON dicts.

Responses are read raw (`_preload_content=False`) and parsed with `json`: the operator handles
objects as data, and skipping the client's model classes makes lists and watches several times
cheaper. Errors that callers act on are translated into the exceptions below.
"""

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from autoscaler.api import coordinates as c
from autoscaler.clients.kubeconfig import DEFAULT_KUBECONFIG, client_from_kubeconfig
from autoscaler.clients.ratelimit import TokenBucket

JSON = dict[str, Any]
REQUEST_TIMEOUT = 30.0
# Connections kept per API server: the engine's informers hold a watch each while its writer
# threads send at once; past the pool's size urllib3 opens a new connection per request and
# throws it away (the client's default is 5 per CPU, 10 on two cores).
POOL_CONNECTIONS = 32


class NotFoundError(Exception):
    """The object does not exist (HTTP 404)."""


class ConflictError(Exception):
    """The write lost a race: a stale resourceVersion or an object that already exists (409)."""


class NamespaceTerminatingError(Exception):
    """A create refused because its namespace is being deleted (403, cause NamespaceTerminating)."""


class ExpiredError(Exception):
    """A watch's resourceVersion is too old (HTTP 410): list again."""


@dataclass(frozen=True)
class Resource:
    """How to reach one kind of object: group/version/plural, namespaced."""

    group: str
    version: str
    plural: str

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        scope = f"/namespaces/{namespace}" if namespace else ""
        tail = f"/{name}" if name else ""
        return f"{base}{scope}/{self.plural}{tail}{'/' + sub if sub else ''}"


JOBS = Resource(c.GROUP, c.VERSION, c.PLURAL)
PODS = Resource("", "v1", "pods")
NODES = Resource("", "v1", "nodes")
SERVICES = Resource("", "v1", "services")
EVENTS = Resource("", "v1", "events")
HPAS = Resource("autoscaling", "v2", "horizontalpodautoscalers")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses")
# Kueue's kinds (kueue.x-k8s.io/v1beta2, the version Kueue v0.19 stores).
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads")
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues")
CLUSTER_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues")
RESOURCE_FLAVORS = Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors")
WORKLOAD_PRIORITY_CLASSES = Resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses")
BY_KIND = {
    "Pod": PODS,
    "Service": SERVICES,
    "HorizontalPodAutoscaler": HPAS,
    c.KIND: JOBS,
    "Event": EVENTS,
    "Lease": LEASES,
    "Workload": WORKLOADS,
}


def api_client(*, kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """From a kubeconfig file (`context`, else its current one), else the in-cluster service
    account. A context without a file reads ~/.kube/config, as kubectl would."""
    if kubeconfig or context:
        return _pooled(client_from_kubeconfig(kubeconfig or DEFAULT_KUBECONFIG, context))
    config.load_incluster_config()
    return _pooled(client.ApiClient())


def _pooled(api: client.ApiClient) -> client.ApiClient:
    """`api` with a connection pool of at least POOL_CONNECTIONS."""
    configured = api.configuration.connection_pool_maxsize or 0
    if configured < POOL_CONNECTIONS:
        api.configuration.connection_pool_maxsize = POOL_CONNECTIONS
        api.rest_client.close()
        api.rest_client = rest.RESTClientObject(api.configuration)
    return api


class Kube:
    """JSON in, JSON out, with a count of requests for the benchmarks and metrics. Safe to share
    between threads (the urllib3 pool is; the counts are kept under a lock)."""

    def __init__(self, api: client.ApiClient, *, limiter: TokenBucket | None = None) -> None:
        self.api, self.limiter = api, limiter
        self.requests = 0
        self.writes = 0
        self._counts = threading.Lock()

    def _count(self, method: str) -> None:
        with self._counts:
            self.requests += 1
            self.writes += method != "GET"

    def request(self, method: str, path: str, **options: Any) -> JSON:
        """One request; `options` as `_send`'s. Returns the decoded JSON body."""
        self._count(method)
        response = self._send(method, path, **options)
        response.read()
        data: JSON = json.loads(response.data or b"{}")
        return data

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, Any]] | None = None,
        content_type: str = "application/json",
        timeout: float | None = REQUEST_TIMEOUT,
    ) -> Any:
        if self.limiter is not None:
            self.limiter.wait()
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = self.api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*params, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise _translate(ApiException(http_resp=response))
        return response

    def close(self) -> None:
        self.api.close()

    # -- reads -----------------------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str, *, sub: str = "") -> JSON:
        return self.request("GET", resource.path(namespace, name, sub))

    def serves(self, group: str, version: str) -> bool:
        """Whether the API server serves this group/version (e.g. a CRD is installed)."""
        try:
            self.request("GET", f"/apis/{group}/{version}")
        except NotFoundError:
            return False
        return True

    def may(self, verb: str, resource: Resource, *, namespace: str | None = None) -> bool:
        """Whether this client's identity may `verb` `resource` in `namespace`, else in every
        namespace (a SelfSubjectAccessReview, which every authenticated user may create)."""
        attributes = {"verb": verb, "group": resource.group, "resource": resource.plural}
        if namespace is not None:
            attributes["namespace"] = namespace
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        answer = self.request("POST", path, body=review)
        return bool((answer.get("status") or {}).get("allowed"))

    def list(self, resource: Resource, *, namespace: str | None = None, selector: str = "") -> JSON:
        query = [("labelSelector", selector)] if selector else []
        return self.request("GET", resource.path(namespace), query=query)

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        selector: str = "",
        timeout: int = 60,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[JSON]:
        """Watch events (`type`, `object`) from `resource_version`; ends after `timeout` s.

        `on_open` receives the streaming response, whose `shutdown()` ends the watch at once.
        """
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout),
        ]
        if selector:
            query.append(("labelSelector", selector))
        self._count("GET")
        path = resource.path(namespace)
        response = self._send("GET", path, query=query, timeout=timeout + 10).response
        if on_open is not None:
            on_open(response)
        try:
            for line in iter_resp_lines(response):
                if line.strip():
                    yield self._event(json.loads(line))
        finally:
            response.release_conn()

    @staticmethod
    def _event(event: JSON) -> JSON:
        if event["type"] == "ERROR":
            code = event["object"].get("code")
            raise ExpiredError() if code == 410 else ConflictError(str(event["object"]))
        return event

    # -- writes ----------------------------------------------------------------------------------

    def create(self, obj: JSON, *, resource: Resource | None = None) -> JSON:
        """POST `obj`; `resource` for kinds outside BY_KIND (e.g. a PodGroup of one CRD)."""
        resource = resource or BY_KIND[obj["kind"]]
        return self.request("POST", resource.path(obj["metadata"].get("namespace")), body=obj)

    def replace(self, obj: JSON, *, sub: str = "", resource: Resource | None = None) -> JSON:
        resource = resource or BY_KIND[obj["kind"]]
        metadata = obj["metadata"]
        return self.request(
            "PUT", resource.path(metadata.get("namespace"), metadata["name"], sub), body=obj
        )

    def merge_patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: JSON,
        *,
        sub: str = "",
        strategic: bool = False,
    ) -> JSON:
        """A JSON merge patch; `strategic`: Kubernetes' strategic merge patch (lists merged by
        key, `$patch` directives), for built-in kinds only."""
        path = resource.path(namespace, name, sub)
        kind = "strategic-merge-patch" if strategic else "merge-patch"
        return self.request("PATCH", path, body=patch, content_type=f"application/{kind}+json")

    def delete(
        self, resource: Resource, namespace: str, name: str, *, propagation: str = "Background"
    ) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        self.request("DELETE", resource.path(namespace, name), body=body)


def _translate(error: ApiException) -> Exception:
    if error.status == 403 and _has_cause(error, "NamespaceTerminating"):
        return NamespaceTerminatingError(error.reason)
    if error.status == 404:
        return NotFoundError(error.reason)
    if error.status == 409:
        return ConflictError(error.reason)
    if error.status == 410:
        return ExpiredError(error.reason)
    return error


def _has_cause(error: ApiException, reason: str) -> bool:
    """Whether the server's Status names `reason` among its causes."""
    try:
        status = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        return False
    causes = ((status.get("details") or {}).get("causes") or []) if isinstance(status, dict) else []
    return any(isinstance(cause, dict) and cause.get("reason") == reason for cause in causes)
