"""Grafana dashboards for the engine and the operator, generated from code with Grafana's typed
SDK, grafana-foundation-sdk (its builders and models for Grafana 11.6).

Needs that SDK, which only the `test` extra installs (pyproject.toml; `make` installs it into
.venv from requirements-dev.lock): the image's requirements.lock leaves it out, so there this
package does not import.

`python -m autoscaler.observability.dashboards deploy/grafana` (`make dashboards`) writes
`scaling-decisions.json` and `operator-health.json` (for Grafana's "Import dashboard"), the same
JSON in ConfigMaps labelled `grafana_dashboard: "1"` for Grafana's dashboard sidecar
(`dashboards.yaml`), and the `kustomization.yaml` listing them.

No metric name is spelled here: every query names its series through the metric objects of
`engine_metrics()` and `operator_metrics()` (and `metrics_contract` for the training counter),
and every label it groups or filters by is checked against the metric's own label names
(`promql`). A renamed metric therefore changes the generated files: tests/unit/test_dashboards.py
fails until they are regenerated, and tests/integration/test_dashboards.py runs every query
against a real Prometheus fed by the real engine and operator.

Queries use Grafana's variables: `$namespace`, `$job` and `$instance` (the dashboards' own,
multi-select with All) and `$__rate_interval`/`$__range` (Grafana's). Annotations look back
`$__rate_interval` (not `$__interval`): windows that overlap by a scrape never miss a change
that falls between two steps.

Only `make dashboards` and the tests import this package (the operator and the engine never do;
an import contract in pyproject.toml keeps `autoscaler.cli` from importing it or the SDK), which
is why the SDK is a test dependency, not a runtime one. Its modules: `panels` (queries and
panels), `board` (variables, annotations, the dashboard), one module per dashboard, `generated`
(the files) and `__main__` (the command).
"""
