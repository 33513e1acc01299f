"""Reading kubeconfig files the way kubectl does: several files, a chosen context, its namespace.

The `kubernetes` package does the parsing and merging (its `KubeConfigMerger` splits a
$KUBECONFIG-style list on the path separator and skips files that do not exist); this module
only picks the context and turns the package's errors into one exception the CLI can print.
"""

import os
from collections.abc import Mapping
from typing import Any

from kubernetes import client, config
from kubernetes.config import ConfigException

DEFAULT_KUBECONFIG = "~/.kube/config"


class KubeconfigError(Exception):
    """The kubeconfig is missing, unreadable, or lacks the context asked for."""


def kubeconfig_paths(flag: str | None, environ: Mapping[str, str]) -> str:
    """kubectl's lookup: --kubeconfig, else $KUBECONFIG (a path list), else ~/.kube/config."""
    return flag or environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG


def client_from_kubeconfig(kubeconfig: str, context: str | None) -> client.ApiClient:
    """An API client for `context` (default: the current one) of the kubeconfig path list."""
    try:
        api: client.ApiClient = config.new_client_from_config(
            config_file=kubeconfig, context=context
        )
    except ConfigException as error:
        raise KubeconfigError(str(error)) from None
    return api


def context_namespace(kubeconfig: str, context: str | None) -> str | None:
    """The namespace set in `context` (default: the current context), None when it sets none.

    Without any existing file in `kubeconfig` and without a context asked for, None too: like
    kubectl, offline commands then fall back to "default" instead of failing.
    """
    if context is None and not _existing_files(kubeconfig):
        return None
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except ConfigException as error:
        raise KubeconfigError(str(error)) from None
    chosen = current if context is None else _named(contexts, context)
    namespace = chosen.get("context", {}).get("namespace")
    return str(namespace) if namespace else None


def _named(contexts: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for candidate in contexts:
        if candidate.get("name") == name:
            return candidate
    raise KubeconfigError(f'context "{name}" does not exist')


def _existing_files(kubeconfig: str) -> list[str]:
    paths = (os.path.expanduser(path) for path in kubeconfig.split(os.pathsep) if path)
    return [path for path in paths if os.path.exists(path)]
