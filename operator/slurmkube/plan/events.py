"""Event messages for actions on many objects at once (pure).

One Event per action and reconcile, whatever the fleet size: a 10,000-node
scale-in writes one `SlurmdRemoved`, with the count and a sample of names,
not 10,000 Events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

SAMPLE: Final = 10


def aggregate(action: str, kind: str, names: Sequence[str], sample: int = SAMPLE) -> str:
    """`"<action> 3 <kind>: a, b, c"`, the names cut to `sample` and the rest counted."""
    shown = ", ".join(names[:sample])
    rest = len(names) - sample
    more = f" and {rest} more" if rest > 0 else ""
    return f"{action} {len(names)} {kind}: {shown}{more}"
