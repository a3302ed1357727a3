# Issue 15: what the autoscale poll's "did anything change" costs against real
# slurmctld/slurmrestd (the host's 24.11 build) at 1,000 and 25,000 nodes, beside
# the other candidate signals; exit 1 when the poll's signal misses the 2x target.
# The 25,000-node part takes a few minutes.

.PHONY: bench-slurm-read
SLURM_READ_ARGS ?= --sizes 1000,25000 --repeat 20
bench-slurm-read: venv slurm
	nice -n 5 $(PY) bench/slurm_read.py $(SLURM_READ_ARGS)
