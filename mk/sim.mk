# Fleet simulator and goodput (issue 9): `make sim` runs the reference scenario,
# `make bench-sim` prints its runtime and memory as one JSON line.

.PHONY: sim bench-sim

sim: venv
	$(PY) -m slurmkube_sim --scenario reference --seed 1 --out $(SLURMKUBE_RUN)/sim

bench-sim: venv
	$(PY) bench/sim.py --seed 1 --jobs 100000 --out $(SLURMKUBE_RUN)/bench-sim
