# Container images and the Helm chart (docs/helm.md).
#
#   make images      build slurmkube/operator and slurmkube/slurm with Docker
#                    (IMAGE_TAG=..., IMAGE_REPO=...); fails with a clear message
#                    when no Docker engine answers
#   make helm-crds   copy crds/*.yaml into the chart (helm/slurmkube/crds); the
#                    unit tests fail while the chart's copies are stale
#   make helm-lint   helm lint of the chart, default and non-default values
#   make helm        the pinned helm (go install, cached; e2e/local/install-tools.sh)

IMAGE_REPO ?= slurmkube
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' $(ROOT)/pyproject.toml)
SLURM_IMAGE_TAG ?= 24.11.5
HELM ?= $(SLURMKUBE_CACHE)/bin/helm
CHART := $(ROOT)/helm/slurmkube

.PHONY: images image-operator image-slurm docker-check helm helm-crds helm-lint

# tests/unit/test_helm.py runs the real helm: install it before the unit tests,
# so a fresh CI clone does not depend on cluster-build having run first.
test-unit: helm

helm:
	@command -v go >/dev/null || { echo "helm: Go is required to build it (go not on PATH); see make cluster-build"; exit 1; }
	@bash $(ROOT)/e2e/local/install-tools.sh helm

docker-check:
	@command -v docker >/dev/null && docker info >/dev/null 2>&1 || { \
		echo "make images needs a running Docker engine (docker info failed)."; \
		echo "The images are not needed here: the local runtime runs the local Slurm build (make slurm)."; \
		exit 1; }

images: image-operator image-slurm

# Both builds use the repo root as context (as e2e/kind/run.sh does); each
# Dockerfile's .dockerignore keeps the context to the files it copies.
image-operator: docker-check
	DOCKER_BUILDKIT=1 docker build -f $(ROOT)/images/operator/Dockerfile \
		-t $(IMAGE_REPO)/operator:$(IMAGE_TAG) $(ROOT)

image-slurm: docker-check
	DOCKER_BUILDKIT=1 docker build -f $(ROOT)/images/slurm/Dockerfile \
		-t $(IMAGE_REPO)/slurm:$(SLURM_IMAGE_TAG) $(ROOT)

# Helm installs a chart's crds/ verbatim and cannot template or symlink them,
# so the chart carries copies of the generated CRDs.
helm-crds:
	@rm -f $(CHART)/crds/*.yaml
	@cp $(ROOT)/crds/*.yaml $(CHART)/crds/
	@echo "copied $$(ls $(ROOT)/crds/*.yaml | wc -l) CRDs into $(CHART)/crds"

# The chart has no default image: lint with the names `make images` builds.
helm-lint: helm
	$(HELM) lint --strict $(CHART) --set image.registry=$(IMAGE_REPO)
	$(HELM) lint --strict $(CHART) --set image.registry=$(IMAGE_REPO) --set watchNamespace=slurm --set replicaCount=1
