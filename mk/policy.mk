# The allocation policy's fair share over both schedulers (issue 20), bench/fair_share.py,
# one JSON object, exit 1 on a miss:
#
#   make bench-fair-share   on the local control plane (started if needed): a SlurmCluster
#                           with accounting (slurmdbd over a host MariaDB, 4 slurmd pods,
#                           16 GPUs), Kueue with 12 GPUs of kwok nodes for the teams, the
#                           operator; teams A and B (weights 2:1) saturate both with 1-GPU
#                           60 s jobs; GPU-seconds per team per scheduler over a 40-minute run
#                           (all of it judged); each ratio A/B within 15% of 2.0.
#                           FAIR_SHARE_ARGS="--minutes 60" etc.

FAIR_SHARE_ARGS ?=

.PHONY: bench-fair-share

bench-fair-share: cluster-up
	KUBECONFIG=$(SLURMKUBE_RUN)/kubeconfig PYTHONPATH=$(ROOT)/e2e \
		$(PY) bench/fair_share.py $(FAIR_SHARE_ARGS)
