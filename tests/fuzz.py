"""`make fuzz`: hypothesis-generated PyTorchJob manifests judged by a real API server (the
committed CRD) and by `autoscaler validate`, on a control plane of its own.

    FUZZ_CASES=5000 FUZZ_SEED=7 FUZZ_SHOWN=10 make fuzz

Prints `fuzz: cases N, agreed A, disagreed D` and the first few disagreements; exits 1 if any.
"""

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import yaml
from kubernetes import client, config

from tests.support.controlplane import ControlPlane, binaries_dir
from tests.support.crd import CRD_FILE, established
from tests.support.manifest_strategies import drawn, manifests
from tests.support.manifest_verdicts import judge, summary
from tests.support.polling import wait_for

NAMESPACE = "fuzz"


def run(cases: int, seed_value: int, workdir: Path, *, shown: int) -> int:
    plane = ControlPlane(bin_dir=binaries_dir())
    try:
        plane.start(workdir / "controlplane")
        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(plane.kubeconfig_path)
        )
        with api:
            ext = client.ApiextensionsV1Api(api)
            ext.create_custom_resource_definition(yaml.safe_load(CRD_FILE.read_text()))
            wait_for(lambda: established(ext), what="the PyTorchJob CRD to be Established")
            client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
            jobs = client.CustomObjectsApi(api)
            judged = [
                judge(job, jobs=jobs, namespace=NAMESPACE, workdir=workdir)
                for job in drawn(manifests(), cases=cases, seed_value=seed_value)
            ]
    finally:
        plane.stop()
    print(summary(judged, shown=shown))
    return 1 if any(case.problems for case in judged) else 0


def main() -> int:
    cases = int(os.environ.get("FUZZ_CASES", "1000"))
    seed_value = int(os.environ.get("FUZZ_SEED", "0"))
    print(f"fuzz: {cases} manifests, seed {seed_value}", file=sys.stderr)
    # SIGTERM (make interrupted, a CI timeout) unwinds, so the control plane is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        return run(cases, seed_value, workdir, shown=int(os.environ.get("FUZZ_SHOWN", "3")))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
