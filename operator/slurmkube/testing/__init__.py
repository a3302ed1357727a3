"""Test and demo infrastructure that runs real Slurm daemons on this machine.

Not used by the operator; shipped in the package (like `kopf.testing`) so the
tests, `make demo` and the benchmarks share one launcher.
"""
