"""kwok's Stage configuration for the simulated fleet.

kwok moves simulated nodes and pods through their lifecycle by Stages. We use
the "fast" set `kwokctl` uses (node Ready with lease heartbeats; pods Ready,
Job pods Succeeded, deleted pods removed), read from kwok's own module, with one
change: a Job pod may carry POD_RUNTIME_ANNOTATION (a duration such as "10m") to
stay Running that long before it succeeds. Without it every Job finishes at
once, and tests of queueing (a second Job waits for quota) could not hold quota.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

POD_RUNTIME_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"

STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def render_stages(stage_dir: Path) -> str:
    """The kwok --config file: every Stage of STAGE_FILES, pod-complete with a runtime delay."""
    stages: list[dict[str, Any]] = []
    for rel in STAGE_FILES:
        for stage in yaml.safe_load_all((stage_dir / rel).read_text()):
            if stage and stage["metadata"]["name"] == "pod-complete":
                stage["spec"]["delay"] = {
                    "durationMilliseconds": 0,
                    "durationFrom": {
                        "expressionFrom": f'.metadata.annotations["{POD_RUNTIME_ANNOTATION}"]'
                    },
                }
            if stage:
                stages.append(stage)
    return yaml.safe_dump_all(stages, sort_keys=False)
