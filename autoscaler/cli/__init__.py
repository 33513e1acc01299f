"""`autoscaler`: one command with subcommands."""

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autoscaler.api.crd import crd
from autoscaler.api.defaults import default_job
from autoscaler.api.errors import first_error
from autoscaler.api.manifests import ManifestError, load_jobs
from autoscaler.api.models import PyTorchJob
from autoscaler.api.validation import validate
from autoscaler.cli.engine_command import add_engine_commands
from autoscaler.cli.explain_command import UnknownJobError, add_explain_command
from autoscaler.cli.operator_command import add_gang_scheduler_argument, add_operator_command
from autoscaler.cli.pod_settings import SettingsError, add_pod_arguments, pod_settings
from autoscaler.cli.simulate_command import add_simulate_command
from autoscaler.clients.jobs import managed_job
from autoscaler.clients.kubeconfig import KubeconfigError
from autoscaler.controller import rendezvous, torchft
from autoscaler.controller.builders import desired_objects
from autoscaler.controller.gang import gang_scheduler
from autoscaler.engine.config import ConfigError, EngineConfig, load_config
from autoscaler.engine.throughput_query import refusal
from autoscaler.policies.registry import PolicyError

USAGE_ERROR = 2
ANNOTATION_PROBLEMS = 1
EXAMPLE_JOB = "elastic-resnet.yaml"  # bundled in autoscaler.examples
DEFAULT_NAMESPACE = "default"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.command
    try:
        return command(args)
    except (
        ManifestError,
        PolicyError,
        UnknownJobError,
        SettingsError,
        KubeconfigError,
        ConfigError,
        OSError,
        yaml.YAMLError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except ValidationError as error:  # the schema accepted what the models cannot represent
        print(f"error: {first_error(error)}", file=sys.stderr)
        return USAGE_ERROR


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="autoscaler", description=__doc__)
    commands = root.add_subparsers(required=True, metavar="COMMAND")
    manifests = commands.add_parser("manifests", help="print the project's Kubernetes manifests")
    manifests.add_argument("what", choices=["crd"], help="which manifest")
    manifests.set_defaults(command=print_manifests)
    for name, handler, text in (
        (
            "validate",
            validate_files,
            "check job manifests as the API server would, and their annotations as the"
            " operator and the engine would",
        ),
        ("render", render_files, "print every object the operator would create for the jobs"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("-f", "--filename", type=Path, required=True, action="append")
        sub.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
        sub.set_defaults(command=handler)
        sub.add_argument(
            "-n", "--namespace", default=DEFAULT_NAMESPACE, help="for jobs that name none"
        )
        if name == "validate":
            sub.add_argument(
                "--engine-config",
                type=Path,
                help="the engine's configuration file, for its settings on annotations",
            )
        if name == "render":
            add_pod_arguments(sub)
            add_gang_scheduler_argument(sub)
    add_operator_command(commands)
    add_engine_commands(commands)
    add_explain_command(commands)
    add_simulate_command(commands)
    # Not `demo`: `make demo` runs the simulator (`autoscaler simulate`); this only renders.
    example = commands.add_parser(
        "render-example", help="print every object the operator would create for a bundled job"
    )
    example.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    example.set_defaults(command=render_example)
    return root


def print_manifests(_: argparse.Namespace) -> int:
    sys.stdout.write(dump_yaml([crd()]))
    return 0


def validate_files(args: argparse.Namespace) -> int:
    """Schema errors end the command (exit 2); annotation problems are each printed (exit 1)."""
    config = load_config(args.engine_config)
    found = 0
    for job in valid_jobs(args.filename):
        name = f"{job['kind'].lower()}/{job['metadata'].get('name', '')}"
        problems = annotation_problems(job, namespace=args.namespace, config=config)
        for problem in problems:
            print(f"{name}: {problem}", file=sys.stderr)
        found += len(problems)
        if not problems:
            print(f"{name} is valid")
    return ANNOTATION_PROBLEMS if found else 0


def annotation_problems(job: dict[str, Any], *, namespace: str, config: EngineConfig) -> list[str]:
    """Every problem the operator or the engine would raise on the job's annotations (as an
    Event or a condition), in the namespace the job would be created in."""
    view = operator_view(job, namespace=namespace)
    operator = [problem for mode in (torchft, rendezvous) if (problem := mode.problem(view))]
    metadata = {
        **job.get("metadata", {}),
        "namespace": view.metadata.namespace,
        "creationTimestamp": "1970-01-01T00:00:00Z",  # not in a manifest; unused here
    }
    managed = managed_job({**job, "metadata": metadata})
    if managed is None:  # not elastic: the engine never reads it
        return operator
    engine = list(managed.problems)
    if managed.throughput_query is not None:
        source = config.prometheus
        refused = refusal(
            managed.throughput_query,
            namespace=managed.namespace,
            name=managed.name,
            window=source.window,
            allowed_namespaces=source.job_query_namespaces,
        )
        engine += [refused] if refused else []
    return operator + engine


def render_files(args: argparse.Namespace) -> int:
    jobs, settings = valid_jobs(args.filename), pod_settings(args)
    gang = gang_scheduler(args.gang_scheduler_name)
    objects = [
        obj
        for job in jobs
        for obj in desired_objects(
            operator_view(job, namespace=args.namespace), settings=settings, gang=gang
        )
    ]
    sys.stdout.write(dump(objects, output=args.output))
    return 0


def operator_view(job: dict[str, Any], *, namespace: str = DEFAULT_NAMESPACE) -> PyTorchJob:
    """The job as the operator reads it from the API server: defaulted, in its own namespace,
    else in `namespace` (where `kubectl apply -n` would create it)."""
    parsed = default_job(PyTorchJob.model_validate(job))
    metadata = parsed.metadata.model_copy(
        update={"namespace": parsed.metadata.namespace or namespace}
    )
    return parsed.model_copy(update={"metadata": metadata})


def render_example(args: argparse.Namespace) -> int:
    with resources.as_file(resources.files("autoscaler.examples").joinpath(EXAMPLE_JOB)) as path:
        return render_files(parser().parse_args(["render", "-f", str(path), "-o", args.output]))


def valid_jobs(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """All jobs of the files; the first invalid one ends the command with its first error."""
    jobs = [job for path in paths for job in load_jobs(path)]
    for job in jobs:
        errors = validate(job)
        if errors:
            metadata = job.get("metadata")
            name = metadata.get("name", "") if isinstance(metadata, dict) else ""
            raise ManifestError(f"{job['kind']} {name!r} is invalid: {errors[0]}")
    return jobs


def dump(objects: list[dict[str, Any]], *, output: str) -> str:
    """Multi-document YAML, or a JSON `List`, as `kubectl get -o` prints several objects."""
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    return dump_yaml(objects)


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False, width=120)
