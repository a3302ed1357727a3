# Fleet simulator and goodput (issue 9): `make sim` runs the reference scenario,
# `make bench-sim` prints its runtime and memory as one JSON line.

.PHONY: sim bench-sim

sim: venv
	$(PY) -m slurmkube_sim --scenario reference --seed 1 --out $(SLURMKUBE_RUN)/sim

bench-sim: venv
	$(PY) bench/sim.py --seed 1 --jobs 100000 --out $(SLURMKUBE_RUN)/bench-sim

# Issue 22: sharing against the best static split and the ideal pool, 3 scenarios x 10 seeds;
# one JSON document, exit 1 when the target is missed. SEEDS/FIRST_SEED/JOBS override the
# size and the seeds (FIRST_SEED=11: seeds 11-20).
.PHONY: bench-lending
SEEDS ?= 10
FIRST_SEED ?= 1
JOBS ?= 50000
bench-lending: venv
	nice -n 10 $(PY) bench/lending_policy.py --seeds $(SEEDS) --first-seed $(FIRST_SEED) --jobs $(JOBS) --scenarios reference,alibaba,bursty

# Issue 21: health-aware against naive placement under injected node faults (Meta's Llama 3
# failure rate, signals before failures), 3 scenarios x HEALTH_SEEDS seeds; one JSON
# document, exit 1 when the target is missed.
.PHONY: bench-health
HEALTH_SEEDS ?= 5
HEALTH_JOBS ?= 30000
bench-health: venv
	nice -n 10 $(PY) bench/health_sim.py --seeds $(HEALTH_SEEDS) --jobs $(HEALTH_JOBS) --scenarios reference,stressed,bursty
