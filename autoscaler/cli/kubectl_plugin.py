"""`kubectl autoscaler`: the `autoscaler` explain, render and validate commands under kubectl's
conventions.

kubectl runs any `kubectl-NAME` executable on PATH for `kubectl NAME ...` and hands it the rest
of the command line, flags included, but none of its own settings. So this entry point reads the
kubeconfig as kubectl does (--kubeconfig, else $KUBECONFIG, else ~/.kube/config; --context, else
the current context; -n, else the context's namespace, else "default"), turns the command line
into an `autoscaler` one and runs that: the commands themselves live in `autoscaler.cli`.
"""

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from autoscaler import cli
from autoscaler.clients.kubeconfig import KubeconfigError, context_namespace, kubeconfig_paths

PROG = "kubectl autoscaler"
DESCRIPTION = (
    "Explain, render and validate elastic PyTorchJobs with kubectl's kubeconfig, context and"
    " namespace. The flags below also go after the command."
)
Mapper = Callable[[argparse.Namespace, Mapping[str, str]], list[str]]


class PluginUsageError(ValueError):
    """A command line that kubectl's conventions allow but that names two different things."""


def main(argv: Sequence[str] | None = None) -> int:
    try:
        command = autoscaler_argv(sys.argv[1:] if argv is None else argv, os.environ)
    except (PluginUsageError, KubeconfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return cli.USAGE_ERROR
    return cli.main(command)


def autoscaler_argv(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The `autoscaler` command line that does what `kubectl autoscaler ARGV` asks."""
    args = parser().parse_args(argv)
    mapper: Mapper = args.mapper
    return mapper(args, environ)


def parser() -> argparse.ArgumentParser:
    # kubectl users put global flags anywhere: before the command or after its arguments. The
    # same flags go on the root and on every command; SUPPRESS keeps a command's parser from
    # overwriting with its default a value the root parser already read.
    flags = _kubectl_flags()
    root = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, parents=[flags])
    commands = root.add_subparsers(required=True, metavar="COMMAND")
    explain = commands.add_parser(
        "explain", parents=[flags], help="why a job has its worker count: owner, data, decisions"
    )
    explain.add_argument("job", metavar="NAME|NAMESPACE/NAME")
    explain.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    explain.add_argument("--config", help="the engine's config (for its throughput model)")
    explain.set_defaults(mapper=explain_argv)
    render = commands.add_parser(
        "render", parents=[flags], help="print every object the operator would create for the jobs"
    )
    _add_filenames(render)
    render.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    render.set_defaults(mapper=render_argv)
    validate = commands.add_parser(
        "validate", parents=[flags], help="check job manifests as the API server would"
    )
    _add_filenames(validate)
    validate.set_defaults(mapper=validate_argv)
    return root


def _kubectl_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    flags.add_argument(
        "--kubeconfig", help="kubeconfig path(s); default: $KUBECONFIG, else ~/.kube/config"
    )
    flags.add_argument("--context", help="the kubeconfig context; default: its current one")
    flags.add_argument(
        "-n", "--namespace", help='default: the context\'s namespace, else "default"'
    )
    return flags


def _add_filenames(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "-f", "--filename", required=True, action="append", help="a job manifest (repeatable)"
    )


def explain_argv(args: argparse.Namespace, environ: Mapping[str, str]) -> list[str]:
    kubeconfig = kubeconfig_paths(_flag(args, "kubeconfig"), environ)
    context = _flag(args, "context")
    namespace, name = job_reference(args.job, _flag(args, "namespace"))
    if namespace is None:
        namespace = _default_namespace(kubeconfig, context)
    command = ["explain", f"{namespace}/{name}", "--kubeconfig", kubeconfig, "-o", args.output]
    command += ["--context", context] if context else []
    command += ["--config", args.config] if args.config else []
    return command


def render_argv(args: argparse.Namespace, environ: Mapping[str, str]) -> list[str]:
    namespace = _flag(args, "namespace") or _default_namespace(
        kubeconfig_paths(_flag(args, "kubeconfig"), environ), _flag(args, "context")
    )
    return ["render", *_filenames(args), "-o", args.output, "--namespace", namespace]


def validate_argv(args: argparse.Namespace, environ: Mapping[str, str]) -> list[str]:
    # The cluster flags are accepted (kubectl users pass them out of habit) but change nothing:
    # validation needs no cluster. `-n` is the namespace a job that names none is judged in.
    namespace = _flag(args, "namespace")
    return ["validate", *_filenames(args), *(["--namespace", namespace] if namespace else [])]


def job_reference(job: str, namespace_flag: str | None) -> tuple[str | None, str]:
    """(namespace, name) of NAME or NAMESPACE/NAME; the namespace None when neither names one."""
    namespace, slash, name = job.rpartition("/")
    if not slash:
        return namespace_flag, job
    if not namespace or not name or "/" in namespace:
        raise PluginUsageError(f"expected NAME or NAMESPACE/NAME, got {job!r}")
    if namespace_flag is not None and namespace_flag != namespace:
        raise PluginUsageError(
            f"{job!r} names namespace {namespace!r} but --namespace is {namespace_flag!r}"
        )
    return namespace, name


def _default_namespace(kubeconfig: str, context: str | None) -> str:
    return context_namespace(kubeconfig, context) or cli.DEFAULT_NAMESPACE


def _flag(args: argparse.Namespace, name: str) -> str | None:
    value: str | None = getattr(args, name, None)
    return value


def _filenames(args: argparse.Namespace) -> list[str]:
    return [part for path in args.filename for part in ("-f", path)]
