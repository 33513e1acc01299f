"""Differential judging of one PyTorchJob manifest: the real API server against `validate`.

A case agrees when
- the verdicts are the same: the server accepts the manifest (a server-side dry-run create with
  strict field validation: one request, nothing stored) exactly when `validate()` finds no error
  and `autoscaler validate -f` exits 0;
- the fields are the same: the set of the server's field paths (each `details.causes[].field` of a
  422; each `unknown field "..."` of a strict-decoding 400, or the ObjectMeta field its decoding
  error names) equals the set of `validate()`'s
  `FieldError.field`s, both normalised by `field_path`, and the field `autoscaler validate` prints
  is one of them;
- and, when the server accepts it, `autoscaler render -f` prints its objects (exit 0, no exception).

`render` prints one Pod per replica, so a job the server accepts with 2^31-1 workers (int32, as
upstream) would take hours and gigabytes to print (measured: 2 GB after 5 minutes): jobs of more
than RENDER_LIMIT replicas are judged by the server and `validate` only (docs/pytorchjob.md).
"""

import contextlib
import io
import json
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.api.validation import validate
from autoscaler.cli import main

JSON = dict[str, Any]
UNKNOWN_FIELD = re.compile(r'unknown field "([^"]*)"')
DUPLICATE_FIELD = re.compile(r'duplicate field "([^"]*)"')
# A body ObjectMeta's Go type cannot hold: `... into Go struct field ObjectMeta.name of type string`
# names metadata.name; `... into Go value of type v1.ObjectMeta` names metadata itself.
OBJECT_META_FIELD = re.compile(
    r"into Go (?:struct field ObjectMeta\.(\w+)|value of type v1\.ObjectMeta)"
)
CLI_FIELD = re.compile(r"is invalid: (\S*): ")
RENDER_LIMIT = 1000


def replica_count(job: JSON) -> int:
    """Every replica of an accepted job: the pods `render` prints."""
    specs = job["spec"]["pytorchReplicaSpecs"].values()
    return sum(int(spec.get("replicas") or 1) for spec in specs)  # null: defaulted to 1


def field_path(field: str | None) -> str:
    """One notation for a field path: map keys as `.key`, list indexes as `[0]`, no leading dot.

    The API server writes a CEL rule's fieldPath `.pytorchReplicaSpecs['Worker'].replicas` as
    `spec.pytorchReplicaSpecs[Worker].replicas` and a schema error at the same place as
    `spec.pytorchReplicaSpecs.Worker.replicas`; `<nil>` is its name for the object's root.
    """
    if not field or field == "<nil>":
        return ""
    return re.sub(r"\[([^\]]*[^\]0-9][^\]]*)\]", r".\1", field).lstrip(".")


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    fields: frozenset[str]
    detail: str  # what the judge said, for a disagreement's report


def server_verdict(jobs: client.CustomObjectsApi, namespace: str, job: JSON) -> Verdict:
    try:
        jobs.create_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, job, dry_run="All", field_validation="Strict"
        )
    except client.ApiException as error:
        body = json.loads(error.body) if error.body else {}
        causes = (body.get("details") or {}).get("causes") or []
        detail = (
            f"{error.status}: "
            + "; ".join(f"{cause.get('field')}: {cause.get('message')}" for cause in causes)
            if causes
            else f"{error.status}: {body.get('message', error.reason)}"
        )
        if error.status == 422:
            fields = {field_path(cause.get("field")) for cause in causes}
        elif error.status == 400:
            message = body.get("message", "")
            fields = set(UNKNOWN_FIELD.findall(message) + DUPLICATE_FIELD.findall(message))
            fields |= {f"metadata.{key}".rstrip(".") for key in OBJECT_META_FIELD.findall(message)}
            fields = {field_path(field) for field in fields} or {f"<{detail}>"}
        else:
            fields = {f"<{detail}>"}
        return Verdict(accepted=False, fields=frozenset(fields), detail=detail)
    return Verdict(accepted=True, fields=frozenset(), detail="accepted")


def offline_verdict(job: JSON) -> Verdict:
    errors = validate(job)
    detail = "; ".join(str(error) for error in errors) or "accepted"
    fields = frozenset(field_path(error.field) for error in errors)
    return Verdict(accepted=not errors, fields=fields, detail=detail)


@dataclass(frozen=True)
class Run:
    """One in-process run of the CLI: its exit status and what it printed."""

    status: int | None  # None: it raised
    stdout: str
    stderr: str


def run_cli(argv: list[str]) -> Run:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status: int | None = main(argv)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 1
        except Exception:
            status = None
            err.write(traceback.format_exc())
    return Run(status=status, stdout=out.getvalue(), stderr=err.getvalue())


@dataclass(frozen=True)
class Case:
    job: JSON
    server: Verdict
    offline: Verdict
    cli: Run
    render: Run | None  # run when the server accepts the job

    @property
    def problems(self) -> list[str]:
        """What disagrees; empty when the case agrees."""
        found = []
        if self.server.accepted != self.offline.accepted:
            found.append("verdict: server and validate() differ")
        elif self.server.fields != self.offline.fields:
            found.append("fields: server and validate() differ")
        if self.cli.status not in (0, 2) or (self.cli.status == 0) != self.server.accepted:
            found.append(f"autoscaler validate: exit {self.cli.status}")
        elif self.cli.status == 2:
            printed = CLI_FIELD.search(self.cli.stderr)
            if printed is None or field_path(printed.group(1)) not in self.server.fields:
                found.append("autoscaler validate: printed a field the server did not name")
        if self.render is not None and self.render.status != 0:
            found.append(f"autoscaler render: exit {self.render.status}")
        return found

    def report(self) -> str:
        lines = [
            ", ".join(self.problems),
            f"  job: {json.dumps(self.job)[:1500]}",
            f"  server:   {sorted(self.server.fields)} {self.server.detail[:600]}",
            f"  validate: {sorted(self.offline.fields)} {self.offline.detail[:600]}",
            f"  autoscaler validate: exit {self.cli.status}: {self.cli.stderr.strip()[-600:]}",
        ]
        if self.render is not None and self.render.status != 0:
            lines.append(f"  autoscaler render: {self.render.stderr.strip()[-1500:]}")
        return "\n".join(lines)


def judge(job: JSON, *, jobs: client.CustomObjectsApi, namespace: str, workdir: Path) -> Case:
    """The case of one manifest: the server's, validate()'s and the CLI's answers."""
    path = workdir / "job.json"
    path.write_text(json.dumps(job))
    server = server_verdict(jobs, namespace, job)
    rendered = server.accepted and replica_count(job) <= RENDER_LIMIT
    render = run_cli(["render", "-f", str(path)]) if rendered else None
    return Case(
        job=job,
        server=server,
        offline=offline_verdict(job),
        cli=run_cli(["validate", "-f", str(path)]),
        render=render,
    )


def summary(cases: list[Case], *, shown: int = 3) -> str:
    """`fuzz: cases N, agreed A, disagreed D`, then the first `shown` disagreements."""
    disagreed = [case for case in cases if case.problems]
    line = f"fuzz: cases {len(cases)}, agreed {len(cases) - len(disagreed)}, disagreed {len(disagreed)}"
    accepted = sum(case.server.accepted for case in cases)
    rendered = sum(case.render is not None for case in cases)
    counts = f"  (the server accepted {accepted}, of which {rendered} rendered)"
    return "\n".join([line, counts, *(case.report() for case in disagreed[:shown])])
