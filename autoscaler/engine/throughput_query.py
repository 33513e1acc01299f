"""A job's own throughput query (its `throughput-query` annotation), confined to its namespace.

The engine runs the query every round with its own credentials, so a job's author must not be
able to read another namespace's series, load Prometheus, or report a constant as throughput.
The template is rendered with the job's namespace and name, parsed with `promql-parser` (the
Rust parser of GreptimeTeam/promql-parser, PromQL of Prometheus 2.45), and refused, never
rewritten, unless:
- the cluster operator allows the annotation in the job's namespace
  (`prometheus.job_query_namespaces`);
- every vector selector (each alternative of an `or` inside braces too) has the matcher
  `namespace="<the job's namespace>"` and no other matcher on `namespace` (no regex, no `!=`);
- at least one series is read (`vector(1e9)` reads none);
- it has no subquery (`expr[range:step]` evaluates `expr` at every step of the range).
A refused job is held at its count (`ThroughputQueryRefused`) with an `InvalidAnnotation` Event.
"""

import string
from collections.abc import Mapping, Sequence

import promql_parser

from autoscaler.api.coordinates import ANNOTATION_THROUGHPUT_QUERY
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.state import Step, StepName
from autoscaler.metrics_contract import LABEL_NAMESPACE

PLACEHOLDERS = frozenset({"namespace", "name", "window"})
MAX_QUERY_CHARS = 4096
REFUSED = "ThroughputQueryRefused"  # the hold's reason
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_string(value: str) -> str:
    """`value` as the contents of a PromQL double-quoted string literal (quotes not included).

    Backslash, double quote and line breaks are escaped; other control characters become `\\xNN`.
    """
    return "".join(_escape_char(char) for char in value)


def _escape_char(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if ord(char) < 0x20 or ord(char) == 0x7F:
        return f"\\x{ord(char):02x}"
    return char


def check_template(template: str) -> None:
    """Raise ValueError unless every field is a bare `{namespace}`, `{name}` or `{window}`."""
    for _, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        if field not in PLACEHOLDERS or spec or conversion:
            raise ValueError(
                f"query template field {{{field}}} is not one of {sorted(PLACEHOLDERS)}"
            )


def render_query(template: str, *, namespace: str, name: str, window: str) -> str:
    return template.format(
        namespace=escape_string(namespace), name=escape_string(name), window=window
    )


def refusal(
    template: str,
    *,
    namespace: str,
    name: str,
    window: str,
    allowed_namespaces: Sequence[str] | None = None,
) -> str | None:
    """Why the engine refuses to run the job's own query template, or None when it runs it."""
    what = ANNOTATION_THROUGHPUT_QUERY
    if allowed_namespaces is not None and namespace not in allowed_namespaces:
        return (
            f"{what} is not allowed in namespace {namespace!r} by the engine's"
            " prometheus.job_query_namespaces"
        )
    if not template.strip() or len(template) > MAX_QUERY_CHARS:
        return f"{what} must be a PromQL expression of 1 to {MAX_QUERY_CHARS} characters"
    try:
        check_template(template)
        query = render_query(template, namespace=namespace, name=name, window=window)
    except ValueError as exc:
        return f"{what}: {exc} (write PromQL's own braces as {{{{ and }}}})"
    try:
        expr = promql_parser.parse(query)
    except ValueError as exc:
        return f"{what}: not PromQL: {exc}"
    problem = _unconfined(expr, namespace=namespace)
    return f"{what}: {problem}" if problem else None


def _unconfined(expr: promql_parser.Expr, *, namespace: str) -> str | None:
    """What lets the query read beyond the job's namespace or read nothing, if anything."""
    problems: list[str] = []
    selectors = 0

    def visit(node: promql_parser.Expr) -> bool:
        nonlocal selectors
        if isinstance(node, promql_parser.SubqueryExpr):
            problems.append("subqueries are refused (each evaluates its query at every step)")
        elif isinstance(node, promql_parser.VectorSelector):
            selectors += 1
            groups = node.matchers.or_matchers or [node.matchers.matchers]
            for group in groups:
                if (why := _selector_problem(group, namespace=namespace)) is not None:
                    problems.append(f"{node}: {why}")
        return not problems

    promql_parser.walk(expr, pre_visit=visit)
    if problems:
        return problems[0]
    if selectors == 0:
        return "it reads no series (a constant is no throughput)"
    return None


def _selector_problem(matchers: Sequence[promql_parser.Matcher], *, namespace: str) -> str | None:
    on_namespace = [m for m in matchers if m.name == LABEL_NAMESPACE]
    own = [m for m in on_namespace if m.op == promql_parser.MatchOp.Equal and m.value == namespace]
    if not own:
        return f'every selector must match {LABEL_NAMESPACE}="{namespace}" exactly'
    if len(own) < len(on_namespace):
        return f"no other matcher on {LABEL_NAMESPACE} (regular expressions included)"
    return None


def refused_queries(
    jobs: Sequence[ManagedJob], *, window: str, allowed_namespaces: Sequence[str] | None
) -> dict[JobKey, str]:
    """Why each job's own throughput query is refused, for the jobs whose query is."""
    found = {
        job.key: refusal(
            job.throughput_query,
            namespace=job.namespace,
            name=job.name,
            window=window,
            allowed_namespaces=allowed_namespaces,
        )
        for job in jobs
        if job.throughput_query is not None
    }
    return {key: why for key, why in found.items() if why is not None}


def refused_holds(jobs: Sequence[ManagedJob], refused: Mapping[JobKey, str]) -> dict[JobKey, Step]:
    """A refused job is held at its count: never sized on a query it may not run (a held-back
    job stays held back)."""
    return {
        job.key: Step(
            name=StepName.HOLD,
            replicas=job.replicas,
            reason=REFUSED,
            message=f"{refused[job.key]}: keeping the count",
        )
        for job in jobs
        if job.key in refused and not job.held_back
    }
