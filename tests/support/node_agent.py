"""A process "kubelet" for integration tests: runs the Pods bound to its Nodes as local processes.

`NodeAgent` registers Nodes with the real API server (capacity incl. `nvidia.com/gpu`, a Ready
condition, a Lease renewed every `heartbeat_seconds`), so the real kube-scheduler binds pods to
them. Each pod bound to one of its Nodes gets a network namespace on a private bridge, and each
container's `command` + `args` runs there as the init of a PID namespace of its own, with the
pod's hostname (`container_init.py`): as with runc, a container is all of its processes, so its
end (exit, crash, kill, deletion past its grace period, a lost node) ends every one of them,
whatever session it started. Signals go to the container's init, which receives those it handles
(and SIGKILL): a process that installs no SIGTERM handler runs on until the grace period ends.
Status (phase, IPs, conditions, container states, restarts with back-off) is written through
the pods' `status` subresource; deletion follows the kubelet: SIGTERM, SIGKILL after the grace
period, then the object is removed with a uid precondition.

Limitations (a test double, not a kubelet):
- No images: `image` is ignored; the agent's environment stands in for it (commands resolve
  through `base_env`'s PATH). A container without `command` fails with CreateContainerError.
- Volumes are ignored (pods share the host filesystem); `workingDir` is honoured, else each pod
  gets a scratch directory. No resource enforcement (requests matter to the scheduler only),
  no probes (a running container is ready), no lifecycle hooks, no `envFrom`; `valueFrom` only
  as a fieldRef to metadata.name/namespace/uid, spec.nodeName, status.podIP/hostIP. Ordinary
  init containers run in order; sidecars (init containers with restartPolicy) are not supported.
- No cluster DNS, no Service IPs: a pod's /etc/hosts (`ip netns exec` bind-mounts
  /etc/netns/<netns>/hosts over it) names the pod itself and the ready pods behind every
  headless Service of its namespace; its resolv.conf names no server, so other lookups fail
  at once. No Service IPs either: a ClusterIP Service whose ports target the same port names
  its ready pods like a headless one (what kube-proxy's forwarding amounts to for a client that
  resolves the name per connection); others are not routed. hostNetwork is not supported.
- Headless Service names list pods whose phase is Running (any pod with an IP if the Service
  publishes not-ready addresses), as Endpoints would without probes.
- All Nodes of one agent share its bridge, hence one InternalIP/hostIP.
- Nodes are registered untainted: the not-ready taint the API server adds on creation is removed
  by the agent (no node-lifecycle controller runs to lift it).
- Restarts back off as the kubelet's do: the first restart at once, then `backoff_base`
  doubling up to `backoff_cap`; reset after a run of `backoff_reset_seconds`.
- `lose_node` is a host gone silent: its pods' links go down (peers get no reset, only
  silence), then every container is killed. The agent runs no node-lifecycle controller: the
  Node stays Ready in the API unless kube-controller-manager's marks it NotReady from the stale
  Lease, and the scheduler may still bind pods to it (they stay Pending).
- `stop()` deletes its Nodes and Leases and force-deletes pods still bound to them (as the pod
  garbage collector does for a deleted Node), so a later agent with the same node names starts
  clean.
Needs root (network namespaces, veth pairs, a bridge, /etc/netns).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from autoscaler.clients.kube import (
    LEASES,
    PODS,
    SERVICES,
    ConflictError,
    Kube,
    NotFoundError,
    Resource,
)

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
LEASE_NAMESPACE = "kube-node-lease"
NODES = Resource("", "v1", "nodes")
IP = shutil.which("ip") or "ip"
# Runs each container as the init of a PID namespace of its own, inside the pod's netns.
CONTAINER_INIT = Path(__file__).with_name("container_init.py")
FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "status.podIP",
    "status.hostIP",
)
REPO_ROOT = Path(__file__).resolve().parents[2]
# Fast enough for tests: heartbeats every second, restarts backing off 1 s, 2 s, 4 s, 4 s, ...
TEST_TIMING = {"heartbeat_seconds": 1.0, "backoff_base": 1.0, "backoff_cap": 4.0}
log = logging.getLogger(__name__)


def default_base_env() -> dict[str, str]:
    """The test interpreter's bin first on PATH (so `python3` is this venv's), the repo root on
    PYTHONPATH, HOME and LANG as the tests have them."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', os.defpath)}"
    env = {"PATH": path, "PYTHONPATH": str(REPO_ROOT)}
    return env | {k: os.environ[k] for k in ("HOME", "LANG") if k in os.environ}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu: str = "4"
    memory: str = "16Gi"
    gpus: int = 2
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)


class ContainerConfigError(Exception):
    """The container cannot start as specified (its waiting reason and message)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# -- small helpers ---------------------------------------------------------------------------------


def _time(micro: bool = False) -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _ip(*args: str) -> str:
    result = subprocess.run([IP, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _ip_quiet(*args: str) -> None:
    """Teardown: the object may already be gone."""
    subprocess.run([IP, *args], capture_output=True, check=False)


def _container_init(handle: int) -> int | None:
    """The host PID of a container's init: the only child of its handle, once it has forked."""
    try:
        children = Path(f"/proc/{handle}/task/{handle}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it, by the kernel's child lists."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(child) for child in (task / "children").read_text().split()]
    return found


def _signal_container(handle: int, sig: int) -> None:
    """As runc's kill: a signal goes to the container's init (through its handle, which forwards
    it); SIGKILL straight to the init, so that every process of the container is gone once its
    handle exits."""
    target = (_container_init(handle) or handle) if sig == signal.SIGKILL else handle
    with contextlib.suppress(ProcessLookupError):
        os.kill(target, sig)


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, `$$` escapes, rest kept."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return re.sub(r"\$\$|\$\(([^)]*)\)", replace, text)


def _write_in_place(path: Path, text: str) -> None:
    """Overwrite without replacing the inode: `ip netns exec` bind-mounted this very file."""
    if not path.exists():
        path.write_text(text)
        return
    with path.open("r+") as handle:
        handle.write(text)
        handle.truncate()


def _resolvable(spec: JSON) -> bool:
    """Headless, or a ClusterIP Service that forwards each port to the same port."""
    if spec.get("clusterIP") == "None":
        return True
    if spec.get("type", "ClusterIP") != "ClusterIP" or not spec.get("selector"):
        return False
    return all(p.get("targetPort", p.get("port")) == p.get("port") for p in spec.get("ports") or [])


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# -- network -------------------------------------------------------------------------------------


def _taken_prefixes() -> set[str]:
    names = re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link"), flags=re.MULTILINE)
    names += [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]
    return {n[:6] for n in names}


def _used_networks() -> list[ipaddress.IPv4Network]:
    text = _ip("-4", "route") + _ip("-4", "addr")
    found = re.findall(r"(?<![\d.])(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", text)
    nets = [ipaddress.IPv4Network(a, strict=False) for a in found]
    return [*nets, ipaddress.IPv4Network("10.0.0.0/16")]  # the API server's Service range


class Network:
    """One bridge with a private /24 (host side .1) and one netns + veth pair per pod."""

    def __init__(self) -> None:
        taken = _taken_prefixes()
        self.prefix = next(
            p for p in (f"na{random.randrange(16**4):04x}" for _ in range(1000)) if p not in taken
        )
        used = _used_networks()
        self.subnet = next(
            net
            for net in (
                ipaddress.IPv4Network(
                    f"10.{random.randrange(64, 255)}.{random.randrange(256)}.0/24"
                )
                for _ in range(1000)
            )
            if not any(net.overlaps(u) for u in used)
        )
        self.bridge = f"{self.prefix}br"
        self.host_ip = str(self.subnet.network_address + 1)
        self._free = list(range(2, 255))
        self._index = 0
        self._namespaces: dict[str, tuple[str, int]] = {}  # netns -> (host veth, host number)
        self._bridge_up = False

    def create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._bridge_up = True
        _ip("addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add_pod(self) -> tuple[str, str]:
        """A new pod namespace on the bridge: (netns name, pod IP)."""
        self._index += 1
        number = self._free.pop(0)
        netns, veth = f"{self.prefix}-{self._index}", f"{self.prefix}v{self._index}"
        self._namespaces[netns] = (veth, number)
        ip = str(self.subnet.network_address + number)
        _ip("netns", "add", netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "route", "add", "default", "via", self.host_ip)
        return netns, ip

    def cut(self, netns: str) -> None:
        """The pod's link goes down: frames to and from it are dropped, nothing is refused."""
        _ip("link", "set", self._namespaces[netns][0], "down")

    def remove_pod(self, netns: str) -> None:
        veth, number = self._namespaces.pop(netns)
        pids = subprocess.run(
            [IP, "netns", "pids", netns], capture_output=True, text=True, check=False
        )
        for pid in pids.stdout.split():  # stragglers that left their container's process group
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _ip_quiet("link", "del", veth)
        _ip_quiet("netns", "del", netns)
        shutil.rmtree(Path("/etc/netns") / netns, ignore_errors=True)
        self._free.append(number)

    def destroy(self) -> None:
        for netns in list(self._namespaces):
            self.remove_pod(netns)
        if self._bridge_up:
            _ip_quiet("link", "del", self.bridge)
            self._bridge_up = False


# -- pod state -----------------------------------------------------------------------------------


@dataclass
class Container:
    name: str
    spec: JSON
    init: bool
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    started: float = 0.0  # monotonic
    state: JSON = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JSON = field(default_factory=dict)
    termination: JSON | None = None
    restart_count: int = 0
    runs: int = 0
    backoff: float = 0.0
    start_at: float | None = 0.0  # monotonic time of the next start; None: no start coming
    done: bool = False  # terminated for good

    @property
    def exit_code(self) -> int | None:
        return None if self.termination is None else int(self.termination["exitCode"])


@dataclass
class PodState:
    uid: str
    namespace: str
    name: str
    node: str
    spec: JSON
    directory: Path
    hostname: str = ""
    netns: str | None = None
    ip: str = ""
    init: list[Container] = field(default_factory=list)
    main: list[Container] = field(default_factory=list)
    start_time: str = ""
    transitions: dict[str, tuple[str, str]] = field(default_factory=dict)
    kill_at: float | None = None  # set once deletion began
    sigkilled: bool = False
    terminal: bool = False
    foreign: bool = False  # found terminal or deleted: never run here, only deleted
    lost: bool = False
    written: JSON | None = None

    @property
    def containers(self) -> list[Container]:
        return [*self.init, *self.main]

    @property
    def initialized(self) -> bool:
        return all(c.exit_code == 0 for c in self.init)

    @property
    def init_failed(self) -> bool:
        return any(c.done and c.exit_code != 0 for c in self.init)


# -- the agent -----------------------------------------------------------------------------------


class NodeAgent:
    """Plays the kubelet for `nodes`; use as a context manager or call start()/stop()."""

    def __init__(
        self,
        api: client.ApiClient,
        nodes: Sequence[NodeSpec],
        *,
        workdir: Path,
        base_env: Mapping[str, str] | None = None,
        heartbeat_seconds: float = 10.0,
        backoff_base: float = 10.0,
        backoff_cap: float = 300.0,
        backoff_reset_seconds: float = 600.0,
        poll_interval: float = 0.1,
    ) -> None:
        self.kube = Kube(api)
        self.nodes = {n.name: n for n in nodes}
        self.workdir = workdir
        self.base_env = dict(base_env if base_env is not None else {"PATH": os.defpath})
        self.heartbeat_seconds = heartbeat_seconds
        self.backoff_base, self.backoff_cap = backoff_base, backoff_cap
        self.backoff_reset_seconds = backoff_reset_seconds
        self.poll_interval = poll_interval
        self.errors: list[str] = []  # unexpected exceptions of the agent's threads
        self._network: Network | None = None
        self._lost: set[str] = set()
        self._pods: dict[str, PodState] = {}  # by uid
        self._finished: set[str] = set()  # uids handled for good
        self._cache: dict[str, dict[tuple[str, str], JSON]] = {"pods": {}, "services": {}}
        self._hosts: dict[Path, str] = {}
        self._dirty = True
        self._cache_lock = threading.Lock()
        self._lock = threading.RLock()
        self._heartbeat_lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[str, Any] = {}  # open watch responses by kind
        self._stopped = False
        self._registered = _time()

    # -- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> NodeAgent:
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._network = Network()
            self._network.create()
            for node in self.nodes.values():
                self._register(node)
            for name, target in (
                ("pods", lambda: self._watch(PODS, "pods")),
                ("services", lambda: self._watch(SERVICES, "services")),
                ("supervisor", self._supervise),
                ("heartbeat", self._heartbeat),
            ):
                thread = threading.Thread(target=target, name=f"node-agent-{name}", daemon=True)
                thread.start()
                self._threads.append(thread)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every process, remove every netns/veth/bridge and the API objects; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        for response in list(self._responses.values()):
            with contextlib.suppress(Exception):
                response.shutdown()
        for thread in self._threads:
            thread.join(timeout=10)
        with self._lock:
            self._kill_containers(list(self._pods.values()))
            if self._network is not None:
                self._network.destroy()
        self._delete_api_objects()

    @property
    def host_ip(self) -> str:
        """The bridge address: every Node's InternalIP and every pod's hostIP."""
        assert self._network is not None
        return self._network.host_ip

    @property
    def prefix(self) -> str:
        """Prefix of every netns, veth and bridge name of this agent."""
        assert self._network is not None
        return self._network.prefix

    # -- test switches ----------------------------------------------------------------------------

    def kill_container(
        self, namespace: str, pod: str, container: str, sig: int = signal.SIGKILL
    ) -> None:
        """Signal a running container (SIGKILL: a crash or OOM kill, every process of it at
        once); restarts follow its pod's restartPolicy."""
        with self._lock:
            state = self._find(namespace, pod)
            found = next((c for c in state.containers if c.name == container), None)
            if found is None or found.proc is None:
                raise LookupError(f"container {container} of {namespace}/{pod} is not running")
            _signal_container(found.proc.pid, sig)

    def container_pids(self, namespace: str, pod: str, container: str) -> list[int]:
        """Host PIDs of every process of a running container (its handle excluded)."""
        with self._lock:
            state = self._find(namespace, pod)
            found = next((c for c in state.containers if c.name == container), None)
            init = None if found is None or found.proc is None else _container_init(found.proc.pid)
        return [] if init is None else _descendants(init)

    def lose_node(self, name: str) -> None:
        """The node's host dies silently: its pods' links go down first, so no FIN or reset
        reaches a peer (they block until their own timeouts, as with a real lost host); then
        every process is killed, and no heartbeat or status is written again."""
        with self._lock:
            with self._heartbeat_lock:  # no renewal in flight after this returns
                self._lost.add(name)
            doomed = [p for p in self._pods.values() if p.node == name]
            assert self._network is not None
            for pod in doomed:
                pod.lost = True
                if pod.netns is not None:
                    self._network.cut(pod.netns)
            self._kill_containers(doomed)

    def pod_ip(self, namespace: str, pod: str) -> str | None:
        """The IP of the pod's current netns (None if not (yet) run here)."""
        with self._lock:
            try:
                return self._find(namespace, pod).ip or None
            except LookupError:
                return None

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        """Output of every incarnation of the container, oldest first (earlier pods of the same
        name included)."""
        directory = self.workdir / "logs" / namespace / pod / container
        files = sorted(directory.glob("*.log")) if directory.is_dir() else []
        return "".join(f.read_text(errors="replace") for f in files)

    def _find(self, namespace: str, name: str) -> PodState:
        matches = [p for p in self._pods.values() if (p.namespace, p.name) == (namespace, name)]
        if not matches:
            raise LookupError(f"pod {namespace}/{name} is not on this agent's nodes")
        return matches[-1]

    # -- nodes ------------------------------------------------------------------------------------

    def _register(self, node: NodeSpec) -> None:
        body = self._node_object(node)
        try:
            created = self.kube.request("POST", NODES.path(), body=body)
        except ConflictError:  # a leftover of an agent that could not clean up
            self.kube.request("DELETE", NODES.path(None, node.name))
            created = self.kube.request("POST", NODES.path(), body=body)
        # Admission (TaintNodesByCondition) taints new Nodes not-ready:NoSchedule; the
        # node-lifecycle controller, which would lift it once Ready, does not run here.
        self.kube.merge_patch(NODES, "", node.name, {"spec": {"taints": None}})
        self._renew_lease(node.name, created["metadata"]["uid"])

    def _node_object(self, node: NodeSpec) -> JSON:
        capacity = {
            "cpu": node.cpu,
            "memory": node.memory,
            "pods": str(node.pods),
            "ephemeral-storage": "100Gi",
            GPU: str(node.gpus),
        }
        uname = os.uname()
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node.name,
                "labels": {
                    "kubernetes.io/hostname": node.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    **node.labels,
                },
            },
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [self._ready_condition(self._registered, self._registered)],
                "addresses": [
                    {"type": "InternalIP", "address": self.host_ip},
                    {"type": "Hostname", "address": node.name},
                ],
                "nodeInfo": {
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                    "kernelVersion": uname.release,
                    "osImage": "node-agent (tests/support/node_agent.py)",
                    "containerRuntimeVersion": "process://0",
                    "kubeletVersion": "v0.0.0-node-agent",
                    "kubeProxyVersion": "",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
            },
        }

    @staticmethod
    def _ready_condition(heartbeat: str, transition: str) -> JSON:
        return {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "node agent is posting ready status",
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": transition,
        }

    def _renew_lease(self, node: str, uid: str | None = None) -> None:
        spec = {
            "holderIdentity": node,
            "leaseDurationSeconds": 40,
            "renewTime": _time(micro=True),
        }
        if uid is None:
            self.kube.merge_patch(LEASES, LEASE_NAMESPACE, node, {"spec": spec})
            return
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": node,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}],
            },
            "spec": spec,
        }
        with contextlib.suppress(NotFoundError):
            self.kube.request("DELETE", LEASES.path(LEASE_NAMESPACE, node))
        self.kube.create(lease)

    def _heartbeat(self) -> None:
        while not self._stopping.wait(self.heartbeat_seconds):
            for name in list(self.nodes):
                with self._heartbeat_lock:
                    if name in self._lost or self._stopping.is_set():
                        continue
                    try:
                        self._renew_lease(name)
                        now = _time()
                        ready = {
                            "status": {"conditions": [self._ready_condition(now, self._registered)]}
                        }
                        self.kube.merge_patch(NODES, "", name, ready, sub="status")
                    except Exception as exc:
                        self._error(f"heartbeat of {name}", exc)

    # -- watches ----------------------------------------------------------------------------------

    def _watch(self, resource: Resource, kind: str) -> None:
        while not self._stopping.is_set():
            try:
                listing = self.kube.list(resource)
                with self._cache_lock:
                    self._cache[kind] = {self._key(o): o for o in listing["items"]}
                    self._dirty = True
                rv = listing["metadata"]["resourceVersion"]
                for event in self.kube.watch(
                    resource,
                    resource_version=rv,
                    timeout=30,
                    on_open=functools.partial(self._opened, kind),
                ):
                    if event["type"] != "BOOKMARK":
                        self._apply(kind, event["type"], event["object"])
                    if self._stopping.is_set():
                        return
            except Exception as exc:
                if self._stopping.is_set():
                    return
                log.debug("node agent: %s watch restarts after %r", kind, exc)
                self._stopping.wait(0.2)

    def _opened(self, kind: str, response: Any) -> None:
        self._responses[kind] = response
        if self._stopping.is_set():
            response.shutdown()

    @staticmethod
    def _key(obj: JSON) -> tuple[str, str]:
        return obj["metadata"]["namespace"], obj["metadata"]["name"]

    def _apply(self, kind: str, event: str, obj: JSON) -> None:
        with self._cache_lock:
            if event == "DELETED":
                self._cache[kind].pop(self._key(obj), None)
            else:
                self._cache[kind][self._key(obj)] = obj
            self._dirty = True

    # -- the supervisor ---------------------------------------------------------------------------

    def _supervise(self) -> None:
        while not self._stopping.wait(self.poll_interval):
            try:
                with self._lock:
                    self._tick()
            except Exception as exc:
                self._error("supervisor", exc)

    def _error(self, where: str, exc: Exception) -> None:
        if not self._stopping.is_set():
            log.exception("node agent: %s failed", where)
            self.errors.append(f"{where}: {exc!r}")

    def _tick(self) -> None:
        with self._cache_lock:
            pods = {
                o["metadata"]["uid"]: o
                for o in self._cache["pods"].values()
                if o["spec"].get("nodeName") in self.nodes
            }
            dirty, self._dirty = self._dirty, False
        for uid, obj in pods.items():
            known = uid in self._pods or uid in self._finished
            if not known and obj["spec"]["nodeName"] not in self._lost:
                self._admit(obj)
                dirty = True
        for pod in list(self._pods.values()):
            if pod.lost:
                continue
            current = pods.get(pod.uid)
            if current is None:
                self._forget(pod)  # deleted behind our back (e.g. force-deleted)
            elif current["metadata"].get("deletionTimestamp"):
                self._terminate(pod, current)
            else:
                self._drive(pod)
                self._write_status(pod, current)
        if dirty:
            self._write_hosts_files()

    def _admit(self, obj: JSON) -> None:
        meta, spec = obj["metadata"], obj["spec"]
        pod = PodState(
            uid=meta["uid"],
            namespace=meta["namespace"],
            name=meta["name"],
            node=spec["nodeName"],
            spec=spec,
            directory=self.workdir
            / "pods"
            / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}",
            hostname=spec.get("hostname") or meta["name"],
            start_time=_time(),
        )
        phase = (obj.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            pod.terminal = pod.foreign = True  # deleted before it started, or not ours to run
            self._pods[pod.uid] = pod
            return
        assert self._network is not None
        pod.netns, pod.ip = self._network.add_pod()
        self._pods[pod.uid] = pod
        etc = Path("/etc/netns") / pod.netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(
            "# node agent: no cluster DNS, names come from /etc/hosts\nnameserver 127.0.0.1\n"
        )
        _write_in_place(etc / "hosts", self._hosts_text(pod, {}, {}))
        pod.directory.mkdir(parents=True, exist_ok=True)
        pod.init = [Container(c["name"], c, True) for c in spec.get("initContainers") or []]
        pod.main = [Container(c["name"], c, False) for c in spec["containers"]]
        if pod.init:
            for c in pod.main:
                c.state = {"waiting": {"reason": "PodInitializing"}}

    # -- containers -------------------------------------------------------------------------------

    def _drive(self, pod: PodState) -> None:
        if pod.terminal:
            return
        now = time.monotonic()
        for c in pod.containers:
            self._reap(pod, c, now)
        if pod.init_failed:
            self._finish(pod)
            return
        pending_init = next((c for c in pod.init if c.exit_code != 0), None)
        for c in [pending_init] if pending_init else pod.main:
            if c.proc is None and c.start_at is not None and c.start_at <= now:
                self._start(pod, c, now)
        if not pending_init and all(c.done for c in pod.main):
            self._finish(pod)

    def _finish(self, pod: PodState) -> None:
        """Terminal: the sandbox goes (its IP stays in the status), the object stays."""
        pod.terminal = True
        for c in pod.containers:
            c.done, c.start_at = True, None
        if pod.netns is not None and self._network is not None:
            self._hosts.pop(Path("/etc/netns") / pod.netns / "hosts", None)
            self._network.remove_pod(pod.netns)
            pod.netns = None

    def _start(self, pod: PodState, c: Container, now: float) -> None:
        try:
            argv, env, cwd = self._launch(pod, c)
        except ContainerConfigError as exc:
            c.state = {"waiting": {"reason": exc.reason, "message": str(exc)}}
            c.start_at = None  # the spec is immutable: it will never start
            return
        logs = self.workdir / "logs" / pod.namespace / pod.name / c.name
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"{len(list(logs.glob('*.log'))):04d}-{pod.uid[:8]}.log"
        runtime = [IP, "netns", "exec", pod.netns or "", sys.executable, "-I", "-S"]
        with path.open("ab") as out:
            c.proc = subprocess.Popen(
                [*runtime, str(CONTAINER_INIT), pod.hostname, cwd, *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        if c.runs:
            c.restart_count += 1
            c.last_state = {"terminated": c.termination}
        c.runs += 1
        c.started, c.started_at = now, _time()
        c.state = {"running": {"startedAt": c.started_at}}
        c.start_at = None

    def _launch(self, pod: PodState, c: Container) -> tuple[list[str], dict[str, str], str]:
        if not c.spec.get("command"):
            raise ContainerConfigError(
                "CreateContainerError",
                f"the node agent runs no images: container {c.name} needs a command",
            )
        env = self._container_env(pod, c.spec)
        argv = [_expand(a, env) for a in [*c.spec["command"], *(c.spec.get("args") or [])]]
        cwd = c.spec.get("workingDir") or str(pod.directory)
        return argv, {"HOSTNAME": pod.hostname, **self.base_env, **env}, cwd

    def _container_env(self, pod: PodState, spec: JSON) -> dict[str, str]:
        if spec.get("envFrom"):
            raise ContainerConfigError(
                "CreateContainerConfigError", "envFrom is not supported by the node agent"
            )
        fields = dict(
            zip(
                FIELD_PATHS,
                (pod.name, pod.namespace, pod.uid, pod.node, pod.ip, self.host_ip),
                strict=True,
            )
        )
        env: dict[str, str] = {}
        for var in spec.get("env") or []:
            if "valueFrom" not in var:
                env[var["name"]] = _expand(var.get("value") or "", env)
                continue
            path = (var["valueFrom"].get("fieldRef") or {}).get("fieldPath")
            if path not in fields:
                raise ContainerConfigError(
                    "CreateContainerConfigError",
                    f"env {var['name']}: the node agent supports valueFrom only as a fieldRef "
                    f"to {', '.join(FIELD_PATHS)}",
                )
            env[var["name"]] = fields[path]
        return env

    def _reap(self, pod: PodState, c: Container, now: float) -> None:
        """Record an exited container (its handle exits after every process of it); plan a
        restart."""
        if c.proc is None:
            return
        pid = c.proc.pid
        code = c.proc.poll()
        if code is None:
            return
        c.proc = None
        c.termination = {
            "exitCode": 128 - code if code < 0 else code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": c.started_at,
            "finishedAt": _time(),
            "containerID": f"process://{pid}",
            **({"signal": -code} if code < 0 else {}),
        }
        c.state = {"terminated": c.termination}
        policy, failed = pod.spec.get("restartPolicy", "Always"), code != 0
        if c.init:
            restart = failed and policy != "Never"
        else:
            restart = policy == "Always" or (policy == "OnFailure" and failed)
        if restart and pod.kill_at is None:
            self._plan_restart(pod, c, now)
        else:
            c.done = True

    def _plan_restart(self, pod: PodState, c: Container, now: float) -> None:
        """kubelet's back-off: the first restart at once, then base, 2*base, ... up to cap."""
        if now - c.started >= self.backoff_reset_seconds:
            c.backoff = 0.0
        delay = c.backoff
        c.backoff = min(c.backoff * 2, self.backoff_cap) if c.backoff else self.backoff_base
        c.start_at = now + delay
        if delay > 0:
            c.last_state = {"terminated": c.termination}
            message = (
                f"back-off {delay:g}s restarting failed container={c.name} "
                f"pod={pod.name}_{pod.namespace}({pod.uid})"
            )
            c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}

    # -- deletion ---------------------------------------------------------------------------------

    def _terminate(self, pod: PodState, obj: JSON) -> None:
        now = time.monotonic()
        if pod.kill_at is None:
            grace = obj["metadata"].get("deletionGracePeriodSeconds") or 0
            pod.kill_at = now + grace
            for c in pod.containers:
                c.start_at = None
                if c.proc is not None:
                    _signal_container(c.proc.pid, signal.SIGTERM)
        for c in pod.containers:
            self._reap(pod, c, now)
        running = [c.proc for c in pod.containers if c.proc is not None]
        if running and now >= pod.kill_at and not pod.sigkilled:
            pod.sigkilled = True
            for proc in running:
                _signal_container(proc.pid, signal.SIGKILL)
        if running:
            return
        if not pod.terminal:
            self._finish(pod)
            self._write_status(pod, obj)  # the final, terminal status, as the kubelet does
        self._forget(pod)
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": pod.uid},
        }
        with contextlib.suppress(Exception):  # 404/409: already gone or replaced
            self.kube.request("DELETE", PODS.path(pod.namespace, pod.name), body=body)

    def _forget(self, pod: PodState) -> None:
        self._kill_containers([pod])
        self._finish(pod)
        self._pods.pop(pod.uid, None)
        self._finished.add(pod.uid)

    @staticmethod
    def _kill_containers(pods: Sequence[PodState]) -> None:
        """SIGKILL every running container of `pods` at once, then wait for all of them."""
        running = [c for pod in pods for c in pod.containers if c.proc is not None]
        for c in running:
            assert c.proc is not None
            _signal_container(c.proc.pid, signal.SIGKILL)
        for c in running:
            assert c.proc is not None
            c.proc.wait()
            c.proc = None

    def _delete_api_objects(self) -> None:
        """Nodes, Leases and the pods still bound to the Nodes (grace 0)."""
        with contextlib.suppress(Exception):
            for obj in self.kube.list(PODS)["items"]:
                if obj["spec"].get("nodeName") in self.nodes:
                    with contextlib.suppress(NotFoundError):
                        self.kube.request(
                            "DELETE",
                            PODS.path(obj["metadata"]["namespace"], obj["metadata"]["name"]),
                            body={
                                "apiVersion": "v1",
                                "kind": "DeleteOptions",
                                "gracePeriodSeconds": 0,
                            },
                        )
            for name in self.nodes:
                with contextlib.suppress(NotFoundError):
                    self.kube.request("DELETE", LEASES.path(LEASE_NAMESPACE, name))
                with contextlib.suppress(NotFoundError):
                    self.kube.request("DELETE", NODES.path(None, name))

    # -- status -----------------------------------------------------------------------------------

    def _phase(self, pod: PodState) -> str:
        if pod.init_failed:
            return "Failed"
        if not pod.initialized or any(c.runs == 0 for c in pod.main):
            return "Failed" if pod.terminal else "Pending"
        if not all(c.done for c in pod.main):
            return "Running"
        return "Succeeded" if all(c.exit_code == 0 for c in pod.main) else "Failed"

    def _condition(self, pod: PodState, kind: str, ok: bool, reason: str = "") -> JSON:
        status = "True" if ok else "False"
        previous = pod.transitions.get(kind)
        if previous is None or previous[0] != status:
            pod.transitions[kind] = (status, _time())
        condition = {"type": kind, "status": status, "lastTransitionTime": pod.transitions[kind][1]}
        if not ok and reason:
            condition["reason"] = reason
        return condition

    def _status(self, pod: PodState, obj: JSON) -> JSON:
        phase = self._phase(pod)
        unready = [c.name for c in pod.main if "running" not in c.state]
        ready_reason = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
        ours = {
            "Initialized": self._condition(
                pod, "Initialized", pod.initialized, "ContainersNotInitialized"
            ),
            "ContainersReady": self._condition(pod, "ContainersReady", not unready, ready_reason),
            "Ready": self._condition(pod, "Ready", not unready, ready_reason),
        }
        others = [
            c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] not in ours
        ]
        if not any(c["type"] == "PodScheduled" for c in others):  # bound without the scheduler
            others.insert(0, self._condition(pod, "PodScheduled", True))
        status: JSON = {
            "phase": phase,
            "conditions": [*others, *ours.values()],
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "startTime": pod.start_time,
            "containerStatuses": [self._container_status(c) for c in pod.main],
        }
        if pod.ip:
            status |= {"podIP": pod.ip, "podIPs": [{"ip": pod.ip}]}
        if pod.init:
            status["initContainerStatuses"] = [self._container_status(c) for c in pod.init]
        return status

    @staticmethod
    def _container_status(c: Container) -> JSON:
        return {
            "name": c.name,
            "state": c.state,
            "lastState": c.last_state,
            "ready": "running" in c.state and not c.init,
            "started": "running" in c.state,
            "restartCount": c.restart_count,
            "image": c.spec.get("image") or "",
            "imageID": "",
            **({"containerID": f"process://{c.proc.pid}"} if c.proc is not None else {}),
        }

    def _write_status(self, pod: PodState, obj: JSON) -> None:
        if pod.lost or pod.foreign:
            return
        status = self._status(pod, obj)
        if status == pod.written:
            return
        patch = {"metadata": {"uid": pod.uid}, "status": status}
        try:
            self.kube.merge_patch(PODS, pod.namespace, pod.name, patch, sub="status")
        except Exception as exc:  # gone or replaced: the watch tells us soon
            log.debug("node agent: status of %s/%s not written: %r", pod.namespace, pod.name, exc)
            return
        pod.written = status

    # -- hosts files ------------------------------------------------------------------------------

    def _write_hosts_files(self) -> None:
        with self._cache_lock:
            pods = dict(self._cache["pods"])
            services = dict(self._cache["services"])
        for pod in self._pods.values():
            if pod.netns is None:
                continue
            path = Path("/etc/netns") / pod.netns / "hosts"
            text = self._hosts_text(pod, pods, services)
            if self._hosts.get(path) != text:
                _write_in_place(path, text)
                self._hosts[path] = text

    def _hosts_text(
        self,
        pod: PodState,
        pods: Mapping[tuple[str, str], JSON],
        services: Mapping[tuple[str, str], JSON],
    ) -> str:
        lines = ["# Kubernetes-managed hosts file (node agent).", "127.0.0.1\tlocalhost"]
        lines.append("::1\tlocalhost ip6-localhost ip6-loopback")
        subdomain = pod.spec.get("subdomain")
        fqdn = (
            f"{pod.hostname}.{subdomain}.{pod.namespace}.svc.cluster.local\t" if subdomain else ""
        )
        lines.append(f"{pod.ip}\t{fqdn}{pod.hostname}")
        for (namespace, name), svc in sorted(services.items()):
            spec = svc.get("spec") or {}
            if namespace != pod.namespace or not _resolvable(spec):
                continue
            names = f"{name} {name}.{namespace} {name}.{namespace}.svc {name}.{namespace}.svc.cluster.local"
            for ip in self._endpoints(spec, namespace, pods):
                lines.append(f"{ip}\t{names}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _endpoints(
        spec: JSON, namespace: str, pods: Mapping[tuple[str, str], JSON]
    ) -> Iterator[str]:
        """IPs of the selected pods that are running (or any with an IP if so published)."""
        selector = spec.get("selector") or {}
        for (ns, _), obj in sorted(pods.items()):
            status = obj.get("status") or {}
            if (
                ns != namespace
                or not status.get("podIP")
                or obj["metadata"].get("deletionTimestamp")
            ):
                continue
            if not _selects(selector, obj["metadata"].get("labels") or {}):
                continue
            if status.get("phase") == "Running" or (
                spec.get("publishNotReadyAddresses") and status.get("phase") == "Pending"
            ):
                yield status["podIP"]
