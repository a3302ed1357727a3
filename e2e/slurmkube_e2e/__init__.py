"""Test-environment tooling for slurmkube: a real Kubernetes control plane on one machine.

It exists because slurmkube's e2e suite must run against the real API machinery
(admission, CEL, garbage collection, the real scheduler, Kueue's webhooks) on
machines without a container engine. The control plane is the upstream code,
built from the Go modules (e2e/local); this package only supervises those
processes, writes their bootstrap objects and simulates a GPU fleet with kwok.
"""
