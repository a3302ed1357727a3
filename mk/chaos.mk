# The fault-injection suite (issue 18, docs/chaos.md), e2e/tests/test_chaos.py:
#
#   make chaos   every fault against a SlurmCluster with accounting and two operators
#                on one Lease, on the local control plane (started and stopped like
#                e2e-local); the JSON report in $(SLURMKUBE_RUN)/chaos-report.json
#                (and .md, the table); fails on any job lost, leak, duplicate slurmd
#                pod, two leaders at once or broken expectation.
#
# `make chaos E2E_NODES=real` runs it on four real kubelets (three slurmd replicas, the
# fourth node lent).
# SLURMKUBE_CHAOS_SEED=N (the job mix and every choice), SLURMKUBE_CHAOS_FAULTS=a,b (a
# part, in the suite's order), SLURMKUBE_CHAOS_REPORT=path. `make test` runs a subset
# (a busy node drained and relabelled) as part of e2e-local.

CHAOS_PYTEST_ARGS ?=

.PHONY: chaos

chaos:
	@$(MAKE) --no-print-directory e2e-local E2E_PYTEST_ARGS="-m chaos -s $(CHAOS_PYTEST_ARGS)"
