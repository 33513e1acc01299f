"""The process node agent (tests/support/node_agent.py) against the real API server and the
real kube-scheduler: scheduling on extended resources, pod networking and names, restarts,
deletion, a lost node, and cleanup. No operator runs here."""

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.clients.kube import LEASES, PODS, Kube, NotFoundError
from tests.support.node_agent import GPU, LEASE_NAMESPACE, NodeAgent, NodeSpec
from tests.support.polling import wait_for
from tests.support.processes import process_gone

JSON = dict[str, Any]
Start = Callable[..., NodeAgent]

SLEEP = "import time; print('ready', flush=True); time.sleep(3600)"


def pod(
    name: str,
    script: str,
    *,
    restart: str = "Never",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    env: list[JSON] | None = None,
    grace: int | None = None,
    node: str | None = None,
) -> JSON:
    container: JSON = {
        "name": "main",
        "image": "python:3.11",
        "command": ["python3", "-c", script],
        "env": env or [],
    }
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    spec: JSON = {"restartPolicy": restart, "containers": [container]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    labels = labels or {"app": name}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def headless(name: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"port": 8080}]},
    }


class Pods:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.kube, self.namespace = Kube(api), namespace

    def create(self, obj: JSON) -> None:
        obj["metadata"]["namespace"] = self.namespace
        self.kube.create(obj)

    def get(self, name: str) -> JSON | None:
        try:
            return self.kube.get(PODS, self.namespace, name)
        except NotFoundError:
            return None

    def status(self, name: str) -> JSON:
        found = self.get(name)
        return (found or {}).get("status") or {}

    def container(self, name: str) -> JSON:
        statuses = self.status(name).get("containerStatuses") or [{}]
        result: JSON = statuses[0]
        return result

    def phase(self, name: str) -> str | None:
        phase: str | None = self.status(name).get("phase")
        return phase

    def wait_phase(self, name: str, phase: str, timeout: float = 20) -> JSON:
        wait_for(lambda: self.phase(name) == phase, timeout=timeout, what=f"{name} {phase}")
        return self.status(name)

    def delete(self, name: str, grace: int | None = None) -> None:
        body: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        self.kube.request("DELETE", PODS.path(self.namespace, name), body=body)


@pytest.fixture
def pods(kube_api: client.ApiClient, namespace: str) -> Pods:
    return Pods(kube_api, namespace)


def scheduled_condition(status: JSON) -> JSON:
    return next((c for c in status.get("conditions") or [] if c["type"] == "PodScheduled"), {})


def test_pod_waits_for_gpus_until_capacity_frees(start_node_agent: Start, pods: Pods) -> None:
    agent = start_node_agent([NodeSpec("node-0", gpus=2)])
    pods.create(pod("big", SLEEP, gpus=2))
    pods.wait_phase("big", "Running")
    pods.create(pod("waiting", SLEEP, gpus=1))
    condition = wait_for(
        lambda: (
            scheduled_condition(pods.status("waiting")).get("status") == "False"
            and scheduled_condition(pods.status("waiting"))
        ),
        what="the scheduler to reject 'waiting'",
    )
    assert condition["reason"] == "Unschedulable"
    assert f"Insufficient {GPU}" in condition["message"]
    assert pods.phase("waiting") == "Pending"

    pods.delete("big", grace=0)
    status = pods.wait_phase("waiting", "Running")
    assert scheduled_condition(status)["status"] == "True"
    assert agent.errors == []


def test_pods_see_their_names_and_reach_each_other(
    start_node_agent: Start, pods: Pods, namespace: str
) -> None:
    agent = start_node_agent([NodeSpec("node-0"), NodeSpec("node-1")])
    server = (
        "import socket, socketserver\n"
        "class H(socketserver.StreamRequestHandler):\n"
        "    def handle(self): self.wfile.write(socket.gethostname().encode())\n"
        "socketserver.TCPServer.allow_reuse_address = True\n"
        "socketserver.TCPServer(('0.0.0.0', 8080), H).serve_forever()\n"
    )
    client_script = (
        "import json, os, socket, sys, time\n"
        "name = sys.argv[1]\n"
        "for _ in range(200):  # until the server runs: in the hosts file and listening\n"
        "    try:\n"
        "        peer = socket.gethostbyname(name)\n"
        "        with socket.create_connection((name, 8080), timeout=5) as s: reply = s.recv(100).decode()\n"
        "        break\n"
        "    except OSError: time.sleep(0.1)\n"
        "print(json.dumps({'hostname': socket.gethostname(), 'own': socket.gethostbyname(socket.gethostname()),\n"
        "    'env_ip': os.environ['POD_IP'], 'node': os.environ['NODE'], 'peer': peer, 'reply': reply,\n"
        "    'names': [socket.gethostbyname(n) for n in (\n"
        "        'server', 'server.' + os.environ['NS'], 'server.' + os.environ['NS'] + '.svc',\n"
        "        'server.' + os.environ['NS'] + '.svc.cluster.local')]}))\n"
    )

    def field(path: str) -> JSON:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    pods.kube.create({**headless("server"), "metadata": {"name": "server", "namespace": namespace}})
    caller = pod(
        "caller",
        client_script,
        node="node-0",
        env=[
            {"name": "POD_IP", **field("status.podIP")},
            {"name": "NODE", **field("spec.nodeName")},
            {"name": "NS", **field("metadata.namespace")},
            {"name": "PEER", "value": "server.$(NS).svc"},
        ],
    )
    caller["spec"]["containers"][0]["args"] = ["$(PEER)"]
    pods.create(caller)
    # The server comes second: the caller's running process sees its already bind-mounted
    # /etc/hosts rewritten in place.
    pods.wait_phase("caller", "Running")
    pods.create(pod("server", server, node="node-1"))

    status = pods.wait_phase("caller", "Succeeded")
    seen = json.loads(agent.container_log(namespace, "caller", "main"))
    server_ip = agent.pod_ip(namespace, "server")
    assert seen["hostname"] == "caller"
    assert seen["own"] == seen["env_ip"] == status["podIP"] == agent.pod_ip(namespace, "caller")
    assert seen["node"] == "node-0"
    assert seen["peer"] == server_ip
    assert seen["names"] == [server_ip] * 4
    assert seen["reply"] == "server"
    assert status["hostIP"] == agent.host_ip
    assert status["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"

    # The host (where Prometheus runs) reaches pods too.
    with socket.create_connection((server_ip, 8080), timeout=5) as conn:
        assert conn.recv(100) == b"server"
    server_status = pods.status("server")
    conditions = {c["type"]: c["status"] for c in server_status["conditions"]}
    assert conditions == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert agent.errors == []


def test_on_failure_restarts_with_back_off(start_node_agent: Start, pods: Pods) -> None:
    agent = start_node_agent()
    script = (
        "import os, time\n"
        "runs = len(os.listdir('.'))\n"
        "open(f'run-{runs}', 'w').close()\n"
        "print(time.time(), flush=True)\n"
        "raise SystemExit(3 if runs < 3 else 0)\n"
    )
    pods.create(pod("flaky", script, restart="OnFailure"))
    seen: list[JSON] = []

    def done() -> bool:
        seen.append(pods.container("flaky"))
        return pods.phase("flaky") == "Succeeded"

    wait_for(done, timeout=20, what="flaky to succeed after 3 failures")
    final = pods.container("flaky")
    assert final["restartCount"] == 3
    assert final["lastState"]["terminated"]["exitCode"] == 3
    assert final["state"]["terminated"]["exitCode"] == 0
    assert any(
        s.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff" for s in seen
    )
    starts = [float(line) for line in agent.container_log(pods.namespace, "flaky", "main").split()]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # kubelet's back-off: the first restart at once, then 1 s, then 2 s (TEST_TIMING).
    assert len(gaps) == 3
    assert gaps[0] < 1.0
    assert 0.9 <= gaps[1] < 1.9
    assert 1.9 <= gaps[2] < 3.5


def test_never_fails_with_the_exit_code(start_node_agent: Start, pods: Pods) -> None:
    start_node_agent()
    pods.create(pod("broken", "raise SystemExit(7)"))
    status = pods.wait_phase("broken", "Failed")
    container = status["containerStatuses"][0]
    assert container["state"]["terminated"]["exitCode"] == 7
    assert container["state"]["terminated"]["reason"] == "Error"
    assert container["restartCount"] == 0
    assert {c["type"]: c.get("reason") for c in status["conditions"]}["Ready"] == "PodCompleted"


def test_killed_container_restarts_with_signal_exit_code(node_agent: NodeAgent, pods: Pods) -> None:
    pods.create(pod("victim", SLEEP, restart="Always"))
    pods.wait_phase("victim", "Running")
    wait_for(
        lambda: "ready" in node_agent.container_log(pods.namespace, "victim", "main"), what="start"
    )
    node_agent.kill_container(pods.namespace, "victim", "main", signal.SIGKILL)
    container = wait_for(
        lambda: (
            (c := pods.container("victim")).get("restartCount") == 1
            and "running" in c["state"]
            and c
        ),
        what="victim restarted",
    )
    assert container["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    assert container["lastState"]["terminated"]["signal"] == signal.SIGKILL


def test_init_containers_and_unsupported_containers(node_agent: NodeAgent, pods: Pods) -> None:
    with_init = pod("with-init", "print(open('ready').read(), end='')")
    with_init["spec"]["initContainers"] = [
        {"name": "prepare", "image": "x", "command": ["sh", "-c", "echo prepared > ready"]}
    ]
    pods.create(with_init)
    no_command = pod("no-command", SLEEP)
    del no_command["spec"]["containers"][0]["command"]
    pods.create(no_command)
    bad_env = pod(
        "bad-env",
        SLEEP,
        env=[{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}}],
    )
    pods.create(bad_env)

    status = pods.wait_phase("with-init", "Succeeded")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert node_agent.container_log(pods.namespace, "with-init", "main") == "prepared\n"

    def waiting(name: str) -> JSON:
        result: JSON = pods.container(name).get("state", {}).get("waiting", {})
        return result

    wait_for(lambda: waiting("no-command").get("reason") == "CreateContainerError", what="error")
    assert "no images" in waiting("no-command")["message"]
    wait_for(lambda: waiting("bad-env").get("reason") == "CreateContainerConfigError", what="error")
    assert "fieldRef" in waiting("bad-env")["message"]
    assert pods.phase("no-command") == pods.phase("bad-env") == "Pending"


def test_deletion_sends_sigterm_then_sigkill_after_the_grace(
    node_agent: NodeAgent, pods: Pods, tmp_path: Path
) -> None:
    marker = tmp_path / "terminated"
    polite = (
        "import os, signal, sys, time\n"
        f"def stop(*_): open({str(marker)!r}, 'w').write('SIGTERM'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True); time.sleep(3600)\n"
    )
    stubborn = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True); time.sleep(3600)\n"
    )
    pods.create(pod("polite", polite))
    pods.create(pod("stubborn", stubborn, grace=2))

    def log(name: str) -> str:
        return node_agent.container_log(pods.namespace, name, "main")

    wait_for(lambda: log("polite") and log("stubborn"), what="both containers to start")
    [pid] = node_agent.container_pids(pods.namespace, "stubborn", "main")

    start = time.monotonic()
    pods.delete("polite")  # the default 30 s grace: SIGTERM ends it at once
    pods.delete("stubborn")
    wait_for(lambda: pods.get("polite") is None, timeout=10, what="polite to be deleted")
    assert marker.read_text() == "SIGTERM"
    assert time.monotonic() - start < 2
    assert not process_gone(pid)
    wait_for(lambda: pods.get("stubborn") is None, timeout=10, what="stubborn to be deleted")
    assert time.monotonic() - start >= 1.8
    assert process_gone(pid)
    assert node_agent.errors == []


def test_lost_node_kills_its_processes_and_stops_its_lease(
    start_node_agent: Start, pods: Pods, kube_api: client.ApiClient
) -> None:
    """The host goes silent: a peer's open connection gets neither data nor a reset, a new one
    no refusal; its processes are gone; its Lease is no longer renewed."""
    agent = start_node_agent([NodeSpec("node-0"), NodeSpec("node-1")])
    pods.create(pod("doomed", HOLD_CONNECTIONS, node="node-0"))
    pods.create(pod("survivor", SLEEP, node="node-1"))
    pods.wait_phase("doomed", "Running")
    pods.wait_phase("survivor", "Running")
    doomed_ip = agent.pod_ip(pods.namespace, "doomed")
    assert doomed_ip is not None
    peer = connect_when_listening(doomed_ip)
    doomed = agent.container_pids(pods.namespace, "doomed", "main")
    survivor = agent.container_pids(pods.namespace, "survivor", "main")
    kube = Kube(kube_api)

    def renewed(node: str) -> str:
        time_: str = kube.get(LEASES, LEASE_NAMESPACE, node)["spec"]["renewTime"]
        return time_

    agent.lose_node("node-0")
    assert all(process_gone(pid) for pid in doomed)
    assert not any(process_gone(pid) for pid in survivor)
    peer.settimeout(2)
    peer.sendall(b"are you there?")
    with peer, pytest.raises(TimeoutError):  # a reset would raise ConnectionResetError
        peer.recv(100)
    with pytest.raises((TimeoutError, OSError)) as refused:
        socket.create_connection((doomed_ip, 8080), timeout=2).close()
    assert not isinstance(refused.value, ConnectionRefusedError)
    lost_lease = renewed("node-0")
    live = {renewed("node-1")}

    def two_heartbeats() -> bool:  # of the live node, after the loss
        live.add(renewed("node-1"))
        return len(live) >= 3

    wait_for(two_heartbeats, timeout=10, what="two heartbeats of node-1")
    assert renewed("node-0") == lost_lease
    assert pods.phase("doomed") == "Running"  # nobody reports for a dead kubelet


HOLD_CONNECTIONS = (
    "import socket, time\n"
    "server = socket.create_server(('0.0.0.0', 8080))\n"
    "held = []\n"
    "while True: held.append(server.accept())\n"
)


def connect_when_listening(ip: str) -> socket.socket:
    sockets: list[socket.socket] = []

    def connected() -> bool:
        with contextlib.suppress(OSError):
            sockets.append(socket.create_connection((ip, 8080), timeout=1))
        return bool(sockets)

    wait_for(connected, what=f"{ip}:8080 to listen")
    return sockets[0]


# A container that leaves processes in a session of their own (as torchrun's workers are).
ESCAPE = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(3600)\n"
    "    time.sleep(3600)\n"
    "print('forked', flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
    "sys.exit(3)\n"
)


@pytest.mark.parametrize("end", ["killed", "main process exits", "deleted past its grace"])
def test_a_container_ends_with_every_process_it_started(
    node_agent: NodeAgent, pods: Pods, end: str
) -> None:
    """As runc: whatever session a process of the container moved to, it ends with it."""
    lifetime = "2" if end == "main process exits" else "3600"
    spec = pod("escape", ESCAPE, grace=1)
    spec["spec"]["containers"][0]["args"] = [lifetime]
    pods.create(spec)
    wait_for(
        lambda: node_agent.container_log(pods.namespace, "escape", "main"),
        what="the container to fork",
    )
    wait_for(
        lambda: len(node_agent.container_pids(pods.namespace, "escape", "main")) == 3,
        what="the main process and its two descendants",
    )
    processes = node_agent.container_pids(pods.namespace, "escape", "main")
    sessions = {os.getsid(pid) for pid in processes}
    assert len(sessions) == 2  # the grandchild left the container's session
    if end == "killed":
        node_agent.kill_container(pods.namespace, "escape", "main", signal.SIGKILL)
        state = pods.wait_phase("escape", "Failed")["containerStatuses"][0]["state"]
        assert state["terminated"]["exitCode"] == 137
    elif end == "main process exits":
        state = pods.wait_phase("escape", "Failed")["containerStatuses"][0]["state"]
        assert state["terminated"]["exitCode"] == 3
    else:
        pods.delete("escape")  # its init ignores SIGTERM (no handler): SIGKILL after 1 s
        wait_for(lambda: pods.get("escape") is None, timeout=10, what="escape to be deleted")
    assert [pid for pid in processes if not process_gone(pid)] == []
    assert node_agent.errors == []


def test_stop_removes_everything(
    start_node_agent: Start, pods: Pods, kube_api: client.ApiClient
) -> None:
    agent = start_node_agent([NodeSpec("node-0")])
    pods.kube.create(
        {**headless("sleeper"), "metadata": {"name": "sleeper", "namespace": pods.namespace}}
    )
    pods.create(pod("sleeper", SLEEP))
    wait_for(
        lambda: agent.container_log(pods.namespace, "sleeper", "main"), what="sleeper to start"
    )
    [pid] = agent.container_pids(pods.namespace, "sleeper", "main")
    prefix = agent.prefix
    assert (
        prefix
        in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout
    )

    agent.stop()
    agent.stop()
    assert process_gone(pid)
    assert (
        prefix
        not in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout
    )
    assert (
        prefix
        not in subprocess.run(["ip", "link"], capture_output=True, text=True, check=True).stdout
    )
    assert not list(Path("/etc/netns").glob(f"{prefix}*"))
    assert client.CoreV1Api(kube_api).list_node(field_selector="metadata.name=node-0").items == []
    assert pods.get("sleeper") is None
