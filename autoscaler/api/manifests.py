"""Reading PyTorchJob manifests from files, with one-line errors for bad input."""

from pathlib import Path
from typing import Any

import yaml

from autoscaler.api import coordinates as c
from autoscaler.api.errors import yaml_problem

JSON = dict[str, Any]


class ManifestError(ValueError):
    """A file that cannot be used as a PyTorchJob manifest; the message is one line."""


def load_jobs(path: Path) -> list[JSON]:
    """Every PyTorchJob document of a (multi-document) YAML or JSON file, in order."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ManifestError(f"{path}: cannot read: {error.strerror}") from None
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: {yaml_problem(error)}") from None
    jobs = [doc for doc in documents if _is_job(doc)]
    if not jobs:
        raise ManifestError(f"{path}: no {c.API_VERSION} {c.KIND} in the file")
    return jobs


def _is_job(document: Any) -> bool:
    if not isinstance(document, dict):
        return False
    return document.get("apiVersion") == c.API_VERSION and document.get("kind") == c.KIND
