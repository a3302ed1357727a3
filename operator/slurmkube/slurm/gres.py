"""GPU counts and types in Slurm's GRES and TRES text (gres.conf(5) `Name[:Type]:Count`)."""

from __future__ import annotations

import re
from typing import Final


def _split_gres(text: str) -> list[str]:
    """`gpu:a:2(IDX:0,2),shard:4` -> ['gpu:a:2(IDX:0,2)', 'shard:4']: commas inside
    parentheses belong to the index list."""
    out, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [e.strip() for e in out if e.strip() and e.strip() != "N/A"]


_COUNT: Final = re.compile(r"\d+")


def gres_gpus(text: str) -> int:
    """GPUs in a node's `gres`/`gres_used` or a job's `gres_detail` entry
    (gres.conf(5) `Name[:Type]:Count`, with `(S:..)` or `(IDX:..)` suffixes)."""
    total = 0
    for entry in _split_gres(text):
        fields = entry.split("(", 1)[0].split(":")
        if fields[0] != "gpu":
            continue
        total += int(fields[-1]) if len(fields) > 1 and _COUNT.fullmatch(fields[-1]) else 1
    return total


def gres_gpu_type(text: str) -> str:
    """The GPU type of a node's `gres` (`gpu:gb200:4(S:0-1)` -> `gb200`; "" untyped):
    with its count, the GRES Slurm registered the node with."""
    for entry in _split_gres(text):
        fields = entry.split("(", 1)[0].split(":")
        if fields[0] == "gpu" and len(fields) == 3:
            return fields[1]
    return ""


def tres_gpus(text: str) -> int:
    """GPUs in a job's `tres_per_node`/`tres_per_job`/`tres_per_task`:
    `gres/gpu:4`, `gres/gpu:gb200:4`, `gres/gpu=1` (per task in 24.11)."""
    total = 0
    for entry in (e.strip() for e in text.split(",")):
        name, _, rest = entry.partition("/")
        if name != "gres":
            continue
        fields = re.split(r"[:=]", rest)
        if fields[0] != "gpu":
            continue
        total += int(fields[-1]) if len(fields) > 1 and _COUNT.fullmatch(fields[-1]) else 1
    return total
