"""What the project's image runs, read from the Dockerfile, so tests can run it as processes."""

import re
import shlex
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"
IMAGE = "pytorch-elastic-autoscaler:0.1.0"  # the Dockerfile's build tag


def script_command(path: str, dockerfile: str | None = None) -> list[str]:
    """The command a shell script the Dockerfile writes at `path` execs (`printf ... > path`)."""
    text = dockerfile if dockerfile is not None else DOCKERFILE.read_text()
    match = re.search(rf"printf '(?P<script>[^']*)' > {re.escape(path)}\b", text)
    if match is None:
        raise LookupError(f"the Dockerfile writes no {path}")
    lines = match["script"].split("\\n")
    assert lines[0] == "#!/bin/sh", lines
    words = shlex.split(lines[1])
    assert words[0] == "exec", words
    assert words[-1] == "$@", words  # the container's arguments follow
    return words[1:-1]
