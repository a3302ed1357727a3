# Local Kubernetes control plane for e2e tests (docs/local-kubernetes.md).
#
#   make cluster-build   build/install the pinned binaries into $(SLURMKUBE_CACHE)/bin (cached)
#   make cluster-up      start etcd, kube-apiserver, controller-manager, scheduler, kwok,
#                        Kueue and a simulated GPU fleet; kubeconfig at $(SLURMKUBE_RUN)/kubeconfig
#   make cluster-status  PIDs, health, versions, nodes
#   make cluster-down    stop everything by PID; fails if a cluster port is still open
#   make e2e-local       cluster-up, then the e2e suite against it; a cluster that
#                        e2e-local started is stopped again afterwards, one that was
#                        already up is left running
#   make e2e-local E2E_SLURM=26.05   the suite's SlurmClusters run that Slurm image
#                        (SLURMKUBE_E2E_SLURM; that image is built first, as `make images`
#                        does); unset,
#                        the default 24.11.5 on the host build. E2E_TESTS picks modules,
#                        e.g. E2E_TESTS=e2e/tests/test_operator_slurm.py
#   make e2e-kind        the same suite on a kind cluster (needs Docker; not in CI)
#   make e2e-real8       the tests that need two NVLink domains of four, on 8 real nodes
#   make real-nodes      join REAL_NODES (default 4) real kubelets on containerd 2.x with
#                        fake GPUs to the running cluster; `make cluster-up REAL_NODES=4`
#                        does it as part of cluster-up (docs/local-kubernetes.md)
#   make real-nodes-build  kubelet (in slurmkube-k8s), containerd; runc and CNI from Debian
#   make test-real-nodes   the real-node tests alone (test_real_nodes.py, test_real_node_cluster.py)
#
# FLEET="--nvl-domains 4 --nodes-per-domain 18" changes the simulated fleet of cluster-up.

E2E_TOOL := PYTHONPATH=$(ROOT)/e2e:$(ROOT)/e2e/local/runtime $(PY) -m slurmkube_e2e
FLEET ?=
E2E_PYTEST_ARGS ?=
E2E_TESTS ?= e2e/tests
# A Slurm version tag (26.05, 26.05.5, 24.11.5); empty keeps the SlurmCluster default.
E2E_SLURM ?=
E2E_NODES ?=
# Tags outside the host build's 24.11 series run the built image: build that
# one first (images/build.py names Slurm images slurm-<major.minor>).
E2E_IMAGES := $(if $(filter-out 24.11 24.11.%,$(E2E_SLURM)),e2e-slurm-image,)
E2E_SLURM_SERIES = $(subst $(eval) ,.,$(wordlist 1,2,$(subst ., ,$(E2E_SLURM))))
# Read when make starts, before cluster-up runs: was a cluster already up?
REAL_NODES ?= 0
# kwok's node Lease duration (cluster.py NODE_LEASE_SECONDS): longer for large fleets.
NODE_LEASE_SECONDS ?= 40
CLUSTER_WAS_UP := $(if $(wildcard $(SLURMKUBE_RUN)/pids/kube-apiserver.pid),1,)

.PHONY: cluster-build cluster-up cluster-down cluster-status e2e-local e2e-extended e2e-real e2e-real8 e2e-kind e2e-slurm-image \
	real-nodes real-nodes-build real-nodes-status test-real-nodes

cluster-build:
	@command -v go >/dev/null || { echo "cluster-build: Go 1.26+ is required (go not on PATH)"; exit 1; }
	@bash $(ROOT)/e2e/local/build.sh
	@bash $(ROOT)/e2e/local/install-tools.sh

cluster-up: venv cluster-build slurm
	@$(E2E_TOOL) up $(FLEET) --node-lease-seconds $(NODE_LEASE_SECONDS)
	@# The local pod runtime: local-0..7 run slurmkube's Slurm pods for real (docs/local-runtime.md).
	@$(RUNTIME_TOOL) up
	@if [ "$(REAL_NODES)" != 0 ]; then $(MAKE) --no-print-directory real-nodes; fi

cluster-down: venv
	@# First, while the API server still answers, so the agents can delete their nodes.
	@$(E2E_TOOL) real-nodes-down
	@$(RUNTIME_TOOL) down
	@$(E2E_TOOL) down

cluster-status: venv
	@$(E2E_TOOL) status

# Four real nodes join the cluster (kubelets on containerd 2.x) for the real-node
# tests; the full fault-injection suite (marker chaos) runs under `make chaos`
# (mk/chaos.mk). --durations: the slowest tests, for CI's budget.
e2e-local: REAL_NODES = 4
e2e-local: $(E2E_IMAGES) cluster-up
	@rc=0; KUBECONFIG=$(SLURMKUBE_RUN)/kubeconfig PYTHONPATH=$(ROOT)/e2e \
		$(if $(E2E_SLURM),SLURMKUBE_E2E_SLURM=$(E2E_SLURM)) \
		$(if $(E2E_NODES),SLURMKUBE_E2E_NODES=$(E2E_NODES)) \
		$(PY) -m pytest $(E2E_TESTS) -q --durations=30 -m "not chaos and not coldfront and not extended" \
		$(E2E_PYTEST_ARGS) \
		|| rc=$$?; \
	if [ -z "$(CLUSTER_WAS_UP)" ]; then $(E2E_TOOL) real-nodes-down || rc=1; \
		$(RUNTIME_TOOL) down || rc=1; $(E2E_TOOL) down || rc=1; fi; \
	exit $$rc

# Longer e2e tests kept out of `make test` for CI's 45-minute warm budget (marker
# extended: key rotation, live-vs-offline goodput, a lent node turning sick, the
# busy-node drain fault, autoscaling's burst and failed resume, the bridge's second
# crash hits).
e2e-extended:
	@$(MAKE) --no-print-directory e2e-local E2E_PYTEST_ARGS="-m extended -s"

# The Slurm e2e tests whose clusters fit on four real kubelets, run there with the
# production defaults (SLURMKUBE_E2E_NODES=real; docs/local-kubernetes.md, "What
# runs where"). The extended ones (key rotation, the policy budget and combined
# cap) run with E2E_PYTEST_ARGS="-m extended".
E2E_REAL_TESTS := test_accounting.py test_policy.py \
	test_cluster_deletion.py test_busy_pod_guard.py test_lost_slurmd_pod.py \
	test_operator_slurm.py test_operator_crash.py test_operator_ha.py \
	test_slurmctld_state.py test_goodput_prometheus.py test_key_rotation.py \
	test_policy_budget.py test_policy_combined_cap.py test_chaos.py
e2e-real:
	@$(MAKE) --no-print-directory e2e-local E2E_NODES=real \
		E2E_TESTS="$(addprefix e2e/tests/,$(E2E_REAL_TESTS))"

# The e2e tests whose clusters span two NVLink domains of four, on eight real
# kubelets, the runtime's shape (docs/local-kubernetes.md, "Real nodes"); the
# extended ones too (a lent node turning sick, the bridge's sharing policy and
# priority requeue): these files are what the target is for.
E2E_REAL8_TESTS := test_topology_tree.py test_topology_follows_fleet.py \
	test_node_health.py test_node_health_domains.py test_kueue_bridge.py \
	test_lent_node_health.py test_kueue_bridge_sharing.py test_autoscaling.py
e2e-real8:
	@$(MAKE) --no-print-directory e2e-local E2E_NODES=real REAL_NODES=8 \
		E2E_TESTS="$(addprefix e2e/tests/,$(E2E_REAL8_TESTS))" \
		E2E_PYTEST_ARGS="-m 'not chaos and not coldfront'"

e2e-slurm-image: images-tools
	@python3 $(ROOT)/images/build.py build --only slurm-$(E2E_SLURM_SERIES)

# Debian's runc and CNI plugins, gcc for Kubernetes' pause; containerd and CoreDNS from
# their Go modules.
REAL_NODE_DEBS := runc containernetworking-plugins gcc libc6-dev
real-nodes-build: cluster-build images
	@for p in $(REAL_NODE_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q $$missing; fi
	@bash $(ROOT)/e2e/local/install-tools.sh containerd coredns

real-nodes: venv real-nodes-build
	@$(E2E_TOOL) real-nodes-up --count $(if $(filter-out 0,$(REAL_NODES)),$(REAL_NODES),4)

test-real-nodes: real-nodes
	KUBECONFIG=$(SLURMKUBE_RUN)/kubeconfig PYTHONPATH=$(ROOT)/e2e \
		$(PY) -m pytest e2e/tests/test_real_nodes.py e2e/tests/test_real_node_cluster.py -q

real-nodes-status: venv
	@$(E2E_TOOL) real-nodes-status

e2e-kind: venv
	@bash $(ROOT)/e2e/kind/run.sh

# `make test` runs the e2e suite on the local control plane too (cold build of
# everything ~14 min on 2 cores, then ~1 min for up + suite + down).
EXTRA_TEST_TARGETS += e2e-local
