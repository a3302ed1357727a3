"""Pure builders: a SlurmCluster -> the Kubernetes objects of each component.

One module per component (slurmctld, slurmd, slurmrestd, slurmdbd, login, the
config reloader), the names and labels they share in `names`, the pod parts
they share in `pod`. Plain manifests, no I/O: the planner (`slurmkube.plan`)
decides which objects are wanted, the controllers apply them.
"""
