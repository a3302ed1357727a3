"""Real Slurm daemons on this machine, from a configuration slurmkube rendered.

The launcher (`local_slurm`), builders of test fleets (`builders`) and the
Kubernetes-free demo (`demo`). A package of its own beside `slurmkube`, so the
operator image does not carry it; the tests, `make demo-slurm` and the
benchmarks share one launcher.
"""
