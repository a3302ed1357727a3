# The allocation policy against a real ColdFront (issue 20, docs/policy.md),
# e2e/tests/test_policy_coldfront.py:
#
#   make e2e-coldfront   ColdFront 1.1.10 from PyPI in its own venv under the cache
#                        (e2e/local/coldfront/install.sh; 50-86 s cold, a no-op
#                        once installed), seeded and served on loopback, as the
#                        AllocationSource of a SlurmCluster with accounting on the
#                        local control plane (started and stopped like e2e-local).
#
# e2e-local deselects it (marker `coldfront`): the install needs the package index.

.PHONY: e2e-coldfront coldfront-install

coldfront-install:
	@$(ROOT)/e2e/local/coldfront/install.sh

e2e-coldfront: coldfront-install
	@$(MAKE) --no-print-directory e2e-local E2E_TESTS=e2e/tests/test_policy_coldfront.py \
		E2E_PYTEST_ARGS="-m coldfront -s"
