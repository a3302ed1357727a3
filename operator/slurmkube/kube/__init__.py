"""Thin Kubernetes adapters: server-side apply, reads, status patches, events, a Lease.

No policy here: what to apply is decided by the planners (`slurmkube.plan`).
"""
