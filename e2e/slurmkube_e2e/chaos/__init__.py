"""The fault-injection suite (`make chaos`, docs/chaos.md): a seeded job mix on a
real SlurmCluster, faults injected one after another, and after each the jobs
lost, leaks, duplicate slurmd pods and the time until the cluster is Ready again,
written as a JSON report.

`records` and `report` are pure (parsing Slurm's answers, judging them, the
report); `jobs`, `checks`, `faults` and `runner` talk to the cluster."""
