"""slurmkube: Slurm on Kubernetes for large GPU fleets.

The package is layered (enforced by import-linter, see `.importlinter`):
pure code (`api`, `topology`, `render`, `placement`, `goodput`) never does I/O;
adapters (`slurm`, `kube`) never decide policy; `controllers` only wire
observe -> plan -> apply.
"""

__version__ = "0.1.0"
SLURM_VERSION = "24.11.5"
