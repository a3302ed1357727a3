"""Pure decisions: what the controllers should do, from a frozen observation.

The cluster plan (`cluster`), autoscaling (`autoscale`), rollout of changed
slurmd pods (`rollout`), the evidence that a config is in force
(`reconfigure`) and the status a cluster reports (`status`). Each is a
function of plain data, table-tested; controllers only observe, call a
planner and apply its answer.
"""
