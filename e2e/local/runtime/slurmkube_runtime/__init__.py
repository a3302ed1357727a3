"""A small node agent that runs the e2e cluster's Slurm pods as real processes.

kwok makes pods look Running but runs nothing; to prove that slurmkube's pods
really run Slurm, this agent plays kubelet for a handful of Node objects of its
own (`local-0..local-7`). Every pod bound to them gets a sandbox: a network,
mount, UTS, IPC and PID namespace with its own address on a bridge the agent
made, a root filesystem (the local Slurm build plus the host's /usr, or a
built image's own files for tags outside 24.11), and the pod's volumes, env
and hostname; its containers run as processes in that sandbox. It is test
infrastructure (docs/local-runtime.md), never part of the operator.

Modules, from pure to effectful:
  layout     paths, names, the subnet: one place so the agent and the CLI agree
  podspec    pure: image check, env, downward API, volume files, hosts file
  imagespec  pure: which root filesystem a tag gets; entrypoint, env, user rules
  nodes      pure: the Node and Lease objects the agent keeps
  status     pure: pod status from container states
  images     built images extracted once per image ID (podman, tar)
  sandbox    namespaces, bridge, veth, mounts, container processes
  agent      the kubelet loop: watch, reconcile, probe, report
  cli        `logs`, `exec`, `up`, `down`, `status`
"""
