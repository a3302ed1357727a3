# Operator benchmark on the live local cluster (issues 2 and 6), bench/reconcile.py,
# one JSON line per part:
#
#   make bench-operator   on the local control plane (started if needed): (a) a
#                         SlurmCluster of 8 local-runtime nodes to Ready, split into
#                         steps; (b) 25,000 kwok GPU nodes watched: the operator's
#                         steady RSS (target under 300 MB) and its reconcile time by
#                         step; (c) a config label changed -> ConfigMap (target p50
#                         under 1 s beyond the debounce); (d) 5 min of label churn no
#                         config reads: reconciles it triggers (target 0); (e) the
#                         operator restarted: start -> first label change served
#                         (target under 15 s). Exits 1 on a miss. OPERATOR_BENCH_ARGS="--watched 1000 --churn-seconds 60".
#                         A cluster it starts renews kwok's node Leases every 5 min, not
#                         10 s (NODE_LEASE_SECONDS, mk/cluster.mk): at 25,000 nodes the
#                         10 s renewals alone overload two cores and nodes flap NotReady.

OPERATOR_BENCH_ARGS ?= --nodes 8 --watched 25000

.PHONY: bench-operator

bench-operator: NODE_LEASE_SECONDS = 1200
bench-operator: cluster-up
	KUBECONFIG=$(SLURMKUBE_RUN)/kubeconfig PYTHONPATH=$(ROOT)/e2e:$(ROOT)/e2e/local/runtime \
		$(PY) bench/reconcile.py $(OPERATOR_BENCH_ARGS)

# The autoscale poll's Slurm read at 1,000 and 25,000 nodes (issue 15), bench/slurm_read.py:
# real slurmctld + slurmrestd on loopback (no cluster needed); exits 1 when the
# poll at 25,000 costs more than 2x the poll at 1,000. SLURM_READ_ARGS="--sizes 1000,10000".
SLURM_READ_ARGS ?=

.PHONY: bench-slurm-read

bench-slurm-read: venv slurm
	$(PY) bench/slurm_read.py $(SLURM_READ_ARGS)
