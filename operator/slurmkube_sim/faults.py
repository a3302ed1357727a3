"""The world's faults for one seed: sudden failures, and sick nodes that signal first.

Pure and seeded, drawn once per run from the seed alone, so every policy and
every placement of a seed meets the same faults at the same times.

- Failures: a Poisson process over the fleet at `FailureModel.per_node_day`
  per node (Meta's Llama 3 fleet by default: 419 unexpected interruptions in
  54 days on 2,048 nodes of 8 H100s; Dubey et al., "The Llama 3 Herd of
  Models", 2024, §3.3.4), each on a node drawn uniformly.
- Signals: `signalled_share` of those failures are announced by a health
  signal (an XID, a rising ECC count, an NVLink flap) a exponential lead time
  before they happen; a further `false_signals_per_failure` signals per
  failure never turn into one and clear by themselves after an exponential
  time. Failures and signals come from two streams, so adding signals moves no
  failure.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from slurmkube_sim.state import FailureModel

DAY_S = 86400.0


class FaultKind(StrEnum):
    FAIL = "fail"
    SIGNAL = "signal"
    CLEAR = "clear"


@dataclass(frozen=True, slots=True)
class Fault:
    t: float
    kind: FaultKind
    node: int
    # For CLEAR: the index (in the schedule) of the SIGNAL it clears.
    signal: int = -1


def fault_schedule(
    model: FailureModel, *, nodes: int, horizon: float, seed: int
) -> tuple[Fault, ...]:
    """Every fault of one run on [0, horizon), in time order (a CLEAR may fall later)."""
    rate = model.per_node_day * nodes / DAY_S
    if rate <= 0 or nodes < 1:
        return ()
    failures = random.Random(seed * 104729 + 3)  # same failures for every policy of a seed
    signals = random.Random(seed * 104729 + 5)
    drawn: list[tuple[float, FaultKind, int, int]] = []  # (t, kind, node, key of its signal)
    t = failures.expovariate(rate)
    while t < horizon:
        node = failures.randrange(nodes)
        drawn.append((t, FaultKind.FAIL, node, -1))
        if signals.random() < model.signalled_share:
            lead = signals.expovariate(1.0 / model.signal_lead_s)
            drawn.append((max(0.0, t - lead), FaultKind.SIGNAL, node, -1))
        t += failures.expovariate(rate)
    false_rate = rate * model.false_signals_per_failure
    if false_rate > 0:
        t = signals.expovariate(false_rate)
        while t < horizon:
            node = signals.randrange(nodes)
            key = len(drawn)
            drawn.append((t, FaultKind.SIGNAL, node, key))
            clear = t + signals.expovariate(1.0 / model.signal_clear_s)
            drawn.append((clear, FaultKind.CLEAR, node, key))
            t += signals.expovariate(false_rate)
    # A stable order by time; a CLEAR names its SIGNAL by position in that order.
    order = sorted(range(len(drawn)), key=lambda i: (drawn[i][0], i))
    position = {i: p for p, i in enumerate(order)}
    out = []
    for i in order:
        t, kind, node, key = drawn[i]
        signal = position[key] if kind is FaultKind.CLEAR else -1
        out.append(Fault(t, kind, node, signal))
    return tuple(out)
