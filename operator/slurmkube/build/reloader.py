"""The slurmctld pod's config reloader: `scontrol reconfigure` the moment new files land (pure).

slurmctld reads slurm.conf and topology.conf (topology.yaml on Slurm 25.05+)
from a ConfigMap volume. The kubelet copies a changed ConfigMap into the pod on
its own schedule, so the operator cannot know when a reconfigure would see the
new files, and a reconfigure issued before they arrive re-reads the old ones.
The pod knows:
this sidecar watches the `config-hash` key of the mounted ConfigMap and runs
`scontrol reconfigure` once per new hash, as soon as it appears. The kubelet
swaps a ConfigMap volume's files all at once (AtomicWriter's `..data`
symlink), so a new hash means the new files are all there.

The operator makes the files arrive quickly by annotating the slurmctld pod
with the new hash: a pod update makes the kubelet sync that pod's volumes
now instead of at its next periodic sync (about a minute). It then confirms
through Slurm that the change is in force (controllers/apply.py) and issues
a reconfigure of its own only if, a propagation window later, it is not.

The last hash applied is kept on an emptyDir, so a restarted reloader
container picks up a change it missed while it was down; a new pod starts
slurmctld on the files it mounts, which the first read takes as applied.
"""

from __future__ import annotations

from typing import Any

from slurmkube.api import well_known as wk

CONTAINER = "config-reloader"
VOLUME = "config-reloader"
STATE_DIR = "/run/slurmkube-reloader"
# How often the mounted hash is read: one small file read and a `sleep`, so
# cheap enough to keep well below the 2 s label-to-Slurm target (DESIGN.md §7).
POLL_SECONDS = 0.1
# After a failed reconfigure (slurmctld still starting, or restarting).
RETRY_SECONDS = 2

# bash, not a program of the image: the same text runs in the slurm image and
# on the local runtime, whose "image" is the host. `$(<file)` reads without a fork;
# `say` stamps a line to the millisecond with builtins only ($EPOCHREALTIME, bash 5).
# bash as a container's PID 1 ignores SIGTERM unless it traps it, and every pod
# deletion would wait out the grace period.
SCRIPT = f"""\
set -u
trap 'exit 0' TERM INT
want_file={wk.CONFIG_DIR}/config-hash
done_file={STATE_DIR}/applied
say() {{ local t=$EPOCHREALTIME; printf '%(%FT%T)T.%.3s %s\\n' "${{t%.*}}" "${{t#*.}}" "$*"; }}
[[ -s $done_file ]] || cat "$want_file" >"$done_file"
say "config-reloader watching $want_file applied=$(<"$done_file")"
while sleep {POLL_SECONDS}; do
  want=$(<"$want_file") || continue
  [[ $want == "$(<"$done_file")" ]] && continue
  say "config-hash=$want landed: scontrol reconfigure"
  if scontrol reconfigure; then
    printf '%s\\n' "$want" >"$done_file"
    say "reconfigured config-hash=$want"
  else
    say "scontrol reconfigure failed config-hash=$want; retrying" >&2
    sleep {RETRY_SECONDS}
  fi
done
"""


def reloader_container(image: str) -> dict[str, Any]:
    """The sidecar; it mounts /etc/slurm like slurmctld (the caller adds that mount)."""
    return {
        "name": CONTAINER,
        "image": image,
        # `command` replaces the image's entrypoint, which would take "bash" for a role.
        "command": ["bash", "-c", SCRIPT],
        "env": [
            {"name": "SLURM_CONF", "value": f"{wk.CONFIG_DIR}/slurm.conf"},
            {"name": "TZ", "value": "UTC"},  # its log's timestamps
        ],
        "volumeMounts": [
            {"name": "slurm-etc", "mountPath": wk.CONFIG_DIR, "readOnly": True},
            {"name": VOLUME, "mountPath": STATE_DIR},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }


def reloader_volume() -> dict[str, Any]:
    return {"name": VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
