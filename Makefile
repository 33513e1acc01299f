# Everything a developer or CI runs. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help demo test test-unit e2e count-tests faults fuzz training-env bench-operator bench-scale bench-optimizer bench-sim bench-goodput lint format docs docs-site crd dashboards openapi lock testenv system-deps clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Every dependency exactly as locked, each file hash-checked (`make lock`), then the project
# itself on top, built with the locked setuptools: a venv here is what CI tested.
$(STAMP): pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements-dev.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# The demo needs only the simulator: the runtime dependencies and the `sim` extra, as locked in
# requirements-demo.lock (hash-checked), not the development toolchain of requirements-dev.lock.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml requirements-demo.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements-demo.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

demo: $(DEMO_STAMP) ## compare the policies on the embedded default (no cluster needed)
	$(BIN)/autoscaler simulate

system-deps: ## install the Debian packages the tests need (Prometheus), if missing
	@command -v prometheus >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus; }

testenv: ## build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, Kueue, the scheduler-plugins scheduler and upstream's training operator (cached outside the repo)
	testenv/build.sh
	testenv/build-kueue.sh
	testenv/build-gang-scheduler.sh
	testenv/build-training-operator.sh

training-env: ## install PyTorch for the training scenarios' pods (cached outside the repo)
	testenv/torch.sh

test: $(STAMP) system-deps testenv training-env ## set everything up, then run the whole suite: unit and integration tiers in three processes, then e2e; each phase's minutes printed
	$(BIN)/python -m tests.suite

E2E_REPORT := $(VENV)/e2e-report.jsonl
e2e: $(STAMP) system-deps testenv training-env ## only the real-training scenarios, then their figures
	rm -f $(E2E_REPORT)
	AUTOSCALER_E2E_REPORT=$(E2E_REPORT) $(BIN)/python -m pytest -m e2e; tests=$$?; \
	  $(BIN)/python -m tests.e2e.report $(E2E_REPORT) && exit $$tests

count-tests: $(STAMP) ## how many tests run against real servers, real training, and none
	$(BIN)/python -m tests.count

faults: $(STAMP) system-deps testenv ## only the fault matrix: servers and processes broken, recovery times printed
	$(BIN)/python -m pytest -m faults

FUZZ_CASES ?= 1000
fuzz: $(STAMP) testenv ## generated manifests judged by a real API server and by `autoscaler validate` (FUZZ_CASES, FUZZ_SEED)
	FUZZ_CASES=$(FUZZ_CASES) $(BIN)/python -m tests.fuzz

test-unit: $(STAMP) ## only the tests that need no servers (two pytest-xdist processes)
	$(BIN)/python -m pytest -m 'not integration' -n 2

bench-operator: $(STAMP) system-deps testenv ## benchmark the operator: 500 jobs x 8 workers vs raw creates
	$(BIN)/python -m benchmarks.bench_operator

bench-scale: $(STAMP) system-deps testenv ## benchmark operator + engine: 5,000 jobs on 1,000 nodes, RSS soak
	$(BIN)/python -m benchmarks.bench_scale

bench-optimizer: $(STAMP) ## benchmark the allocation solver against scipy's MILP
	$(BIN)/python -m benchmarks.bench_optimizer

bench-goodput: training-env ## the gradient-noise measurement's cost on the e2e example's steps (ratio, target <= 1.03)
	PYTHONPATH=. OMP_NUM_THREADS=1 "$$(testenv/torch.sh | tail -1)/bin/python" -m benchmarks.bench_goodput

bench-sim: $(STAMP) ## the policies end to end on Pollux's and ITP traces, then admission, against the targets
	$(BIN)/python -m benchmarks.bench_sim; lineup=$$?; \
	  $(BIN)/python -m benchmarks.bench_admission && exit $$lineup

lint: $(STAMP) ## ruff, mypy and the import contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP) ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

docs: $(STAMP) ## regenerate docs/configuration.md, docs/annotations.md and docs/snapshot.schema.json from the models
	$(BIN)/python -m autoscaler.cli.reference docs

docs-site: $(STAMP) ## build the documentation site into site/, strictly (a broken link or an orphan page fails)
	$(BIN)/mkdocs build --strict

crd: $(STAMP) ## regenerate deploy/crds from the models
	$(BIN)/autoscaler manifests crd > deploy/crds/kubeflow.org_pytorchjobs.yaml

dashboards: $(STAMP) ## regenerate deploy/grafana from code
	$(BIN)/python -m autoscaler.observability.dashboards deploy/grafana

# The Dockerfile installs exactly these (hash-checked). Pins that still satisfy pyproject.toml are
# kept; `make lock UPGRADE=1` moves every pin to the newest allowed. Hashes are PyPI's: a local
# wheel folder in the environment (PIP_FIND_LINKS) is not consulted.
# requirements.lock: the runtime dependencies plus the build backend (build-system.requires, with
# which the image builds the package without build isolation); requirements-dev.lock: those at
# the same versions plus every extra (the venv of `make test` and CI); requirements-demo.lock:
# the first plus the `sim` extra, at the dev lock's versions (`make demo`).
PIP_COMPILE := env -u PIP_FIND_LINKS CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/pip-compile --quiet \
  --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
  $(if $(UPGRADE),--upgrade)
lock: $(STAMP) ## regenerate requirements.lock, requirements-dev.lock and requirements-demo.lock, pinned with hashes (UPGRADE=1 to move)
	$(PIP_COMPILE) --build-deps-for=wheel --output-file=requirements.lock pyproject.toml
	$(PIP_COMPILE) --extra=sim --extra=test --extra=dev --constraint=requirements.lock \
	  --output-file=requirements-dev.lock pyproject.toml
	$(PIP_COMPILE) --build-deps-for=wheel --extra=sim --constraint=requirements-dev.lock \
	  --output-file=requirements-demo.lock pyproject.toml

openapi: $(STAMP) testenv ## refresh the Kubernetes types snapshot from the pinned kube-apiserver
	$(BIN)/python -m tests.support.openapi autoscaler/api/openapi/k8s-types.json

clean: ## remove the venv and caches (not the Kubernetes binaries)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
