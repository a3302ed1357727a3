# Topology benchmarks (issue 6), bench/topology.py, JSON lines:
#
#   make bench-topology   (a) topology render time for 1k/10k/50k nodes (no cluster;
#                         also part of `make bench`), then (b) on the local control plane
#                         (started if needed) with 1,000 kwok nodes: Node label patch ->
#                         `scontrol show topology` p50/p95 over 20 changes with its
#                         breakdown, and the reconfigures a burst of 100 changes costs
#                         (~6 min on 2 cores); exits 1 above its target (p50 2 s).
#                         Issue 15's: TOPOLOGY_BENCH_ARGS="--nodes 10000 --debounce 0.25
#                         --target 1 --slurm 26.05" (26.05 moves relabelled nodes live;
#                         without --slurm the host's 24.11 build reconfigures each time).

TOPOLOGY_BENCH_ARGS ?=

.PHONY: bench-topology

bench-topology: cluster-up
	$(PY) bench/topology.py --part render
	KUBECONFIG=$(SLURMKUBE_RUN)/kubeconfig PYTHONPATH=$(ROOT)/e2e:$(ROOT)/e2e/local/runtime \
		$(PY) bench/topology.py --part follow $(TOPOLOGY_BENCH_ARGS)
