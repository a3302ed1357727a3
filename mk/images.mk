# Container images and the Helm chart (docs/install.md, docs/helm.md).
#
#   make images        build the Slurm 26.05 (Debian forky), Slurm 24.11 (trixie)
#                      and operator images with podman, from debootstrap bases
#                      and Debian's packages, no container registry
#                      (images/build.py; cached by content in $(SLURMKUBE_CACHE)/images)
#   make images-export write them as OCI archives to IMAGES_OUT (default .run/images)
#   make test-images   smoke test: each Slurm image's daemons under podman on
#                      loopback, a job, a clean SIGTERM stop; the operator image's CLI
#   make helm-crds     copy crds/*.yaml into the chart (helm/slurmkube/crds); the
#                      unit tests fail while the chart's copies are stale
#   make helm-lint     helm lint of the chart, default and non-default values
#   make helm          the pinned helm (go install, cached; e2e/local/install-tools.sh)

HELM ?= $(SLURMKUBE_CACHE)/bin/helm
CHART := $(ROOT)/helm/slurmkube
IMAGES_OUT ?= $(SLURMKUBE_RUN)/images
IMAGE_TOOLS := podman buildah runc debootstrap

.PHONY: images images-tools images-export test-images helm helm-crds helm-lint

# tests/unit/test_helm.py runs the real helm: install it before the unit tests,
# so a fresh CI clone does not depend on cluster-build having run first.
test-unit: helm

helm:
	@command -v go >/dev/null || { echo "helm: Go is required to build it (go not on PATH); see make cluster-build"; exit 1; }
	@bash $(ROOT)/e2e/local/install-tools.sh helm

# Debian's packages; the machine's apt sources also give debootstrap its mirror.
images-tools:
	@for t in $(IMAGE_TOOLS); do command -v $$t >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			$(IMAGE_TOOLS) uidmap; fi

images: images-tools
	@python3 $(ROOT)/images/build.py build

images-export: images
	@python3 $(ROOT)/images/build.py export --out $(IMAGES_OUT)

test-images: venv images
	$(PY) -m pytest tests/images -q

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

# `make test` smoke-tests every image (issue 16): about 25 s once built.
EXTRA_TEST_TARGETS += test-images
