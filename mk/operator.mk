# Operator benchmark on the live local cluster (issues 2 and 6), bench/reconcile.py,
# one JSON line per part:
#
#   make bench-operator   on the local control plane (started if needed): (a) a
#                         SlurmCluster of 8 local-runtime nodes to Ready, split into
#                         steps; (b) 10,000 kwok GPU nodes watched: the operator's
#                         steady RSS (target under 300 MB) and its reconcile time by
#                         step (~15 min on 2 cores). OPERATOR_BENCH_ARGS="--watched 1000".

OPERATOR_BENCH_ARGS ?= --nodes 8 --watched 10000

.PHONY: bench-operator

bench-operator: cluster-up
	KUBECONFIG=$(SLURMKUBE_RUN)/kubeconfig PYTHONPATH=$(ROOT)/e2e:$(ROOT)/e2e/local/runtime \
		$(PY) bench/reconcile.py $(OPERATOR_BENCH_ARGS)
