# Kueue bridge benchmark on the live local cluster (issue 7), bench/bridge_live.py, one JSON line:
#
#   make bench-bridge   on the local control plane (started if needed): QuotaReserved ->
#                       check Ready p50/p95 over 20 sequential 1-node workloads on idle
#                       nodes, with the lend path split into steps; then 500 queued
#                       1-node workloads: drain throughput, and no reservation or lease
#                       label left. BRIDGE_BENCH_ARGS="--workloads 100 --sequential 10" etc.
#                       (`make bench` keeps the cluster-free parts: --placement-only,
#                       --planner-only.)

BRIDGE_BENCH_ARGS ?=

.PHONY: bench-bridge

bench-bridge: cluster-up
	KUBECONFIG=$(SLURMKUBE_RUN)/kubeconfig PYTHONPATH=$(ROOT)/e2e:$(ROOT)/e2e/local/runtime:$(ROOT)/bench \
		$(PY) bench/bridge.py --part live $(BRIDGE_BENCH_ARGS)
