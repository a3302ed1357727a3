# slurmkube: the quick start is `make demo` and `make test` (see README.md).
# Every target installs what it needs, idempotently; builds are cached outside
# the checkout (SLURMKUBE_CACHE, default ~/.cache/slurmkube) and runtime state
# lives in .run/ (git-ignored).

SHELL := /bin/bash
.DEFAULT_GOAL := help
ROOT := $(abspath .)
export SLURMKUBE_CACHE ?= $(HOME)/.cache/slurmkube
export SLURMKUBE_SLURM_PREFIX ?= $(SLURMKUBE_CACHE)/slurm/24.11.5
export SLURMKUBE_RUN ?= $(ROOT)/.run
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)

.PHONY: help venv slurm lint typecheck layers check test test-unit test-integration demo demo-down demo-slurm bench crds-check

help:
	@echo "make demo   - local Kubernetes, helm install, a SlurmCluster on local GPU nodes, a gang job"
	@echo "make demo-down - remove the demo and stop the local cluster"
	@echo "make test   - lint, types, layers, unit, real-Slurm integration and e2e tests"
	@echo "make bench  - benchmarks (JSON)"
	@echo "make slurm  - build Slurm 24.11.5 into $(SLURMKUBE_SLURM_PREFIX)"

$(VENV_STAMP): pyproject.toml
	@bash scripts/ensure-python.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q -U pip
	@$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(VENV_STAMP)

slurm:
	@bash images/slurm/build-local.sh

lint: venv
	$(VENV)/bin/ruff check operator tests bench e2e
	$(VENV)/bin/ruff format --check operator tests bench e2e

# mypy's cache outside the checkout: a fresh clone (CI) rechecks only what changed.
typecheck: venv
	MYPY_CACHE_DIR=$(SLURMKUBE_CACHE)/mypy $(VENV)/bin/mypy

layers: venv
	$(VENV)/bin/lint-imports

check: lint typecheck layers

test-unit: venv
	$(PY) -m pytest tests/unit -q

test-integration: venv slurm
	$(PY) -m pytest tests/integration -q -m integration

# Other targets (cluster, sim, e2e, ...) live in mk/*.mk, one file per area.
-include mk/*.mk

test: check test-unit test-integration $(EXTRA_TEST_TARGETS)
	@echo "make test: all green"

# The real thing: cluster-up with four real nodes (kubelets on containerd 2.x),
# helm install (the operator a pod), a SlurmCluster of Slurm 26.05.5 on them
# with the production defaults, a gang job; left running (demo-down removes it
# and stops the cluster). Prometheus plots its goodput.
demo: E2E_SLURM = 26.05
demo: REAL_NODES = 4
demo: promtool e2e-slurm-image cluster-up
	@$(E2E_TOOL) demo

demo-down: venv
	@if [ -f $(SLURMKUBE_RUN)/pids/kube-apiserver.pid ]; then $(E2E_TOOL) demo-down; fi
	@$(MAKE) --no-print-directory cluster-down

# Slurm alone, no Kubernetes: the sample fleet rendered by slurmkube and run by
# real daemons on loopback (48 slurmd), stopped again at the end.
demo-slurm: venv slurm
	$(PY) -m slurmkube_local.demo

bench: venv slurm
	$(PY) bench/render.py
	$(PY) bench/topology.py --part render
	$(PY) bench/bridge.py --placement-only
	$(PY) bench/bridge.py --planner-only
	$(PY) bench/sim.py --seed 1 --jobs 100000 --out $(SLURMKUBE_RUN)/bench-sim
	$(PY) bench/backfill.py
