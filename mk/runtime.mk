# Local pod runtime for e2e tests (docs/local-runtime.md): a node agent that
# registers local-0..local-7 and runs the pods bound to them as real processes
# in their own namespaces (the Slurm daemons of slurmkube's pods).
#
#   make runtime-up      start the agent (needs the control plane: make cluster-up)
#   make runtime-status  agent PID, sandboxes, node readiness
#   make runtime-down    stop the agent by PID; fails if a sandbox process, veth,
#                        the bridge or a mount is left
#
# State and logs in $(SLURMKUBE_RUN)/runtime/.

RUNTIME_TOOL := PYTHONPATH=$(ROOT)/e2e:$(ROOT)/e2e/local/runtime $(PY) -m slurmkube_runtime

.PHONY: runtime-up runtime-down runtime-status

runtime-up: venv
	@$(RUNTIME_TOOL) up

runtime-down: venv
	@$(RUNTIME_TOOL) down

runtime-status: venv
	@$(RUNTIME_TOOL) status
