# promtool, from Debian's prometheus package: `promtool check rules` and
# `promtool test rules` of the chart's goodput rules run in the unit tests
# (tests/unit/test_prometheus_rules.py).
#
#   make promtool      install Debian's prometheus package if promtool is missing

.PHONY: promtool

test-unit: promtool

# On a systemd machine the package starts a Prometheus on :9090; the tests start
# their own, so the packaged service is stopped and disabled right after install.
promtool:
	@command -v promtool >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends prometheus && \
		if [ -d /run/systemd/system ]; then systemctl disable --now prometheus || true; fi; }
