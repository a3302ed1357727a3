"""A lend's transfers from the operator's handover records (`goodput/handovers.py`)
and `slurmkube goodput --workloads --events`, which reads them back from Events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmkube.api import well_known as wk
from slurmkube.cli import main
from slurmkube.goodput import NodeTransferBegan, NodeTransferEnded, Side
from slurmkube.goodput.handovers import (
    BACK,
    LEASE_ENDED,
    LENT,
    Handover,
    LeaseTimes,
    handover_events,
    lent_nodes,
    transfer_times,
)
from tests.unit.test_goodput_exporter import CHECK, at, workload

S, K = Side.SLURM, Side.KUBERNETES
LENT_N1 = Handover(10.5, "n1", LENT, "w1")


ENDED_N1 = Handover(41.0, "n1", LEASE_ENDED, "w1")
BACK_N1 = Handover(47.0, "n1", BACK, "w1")
DONE = LeaseTimes(15.0, 40.0)


@pytest.mark.parametrize(
    ("stamps", "owner", "moving", "lease", "expected"),
    [
        ([LENT_N1], K, K, LeaseTimes(), (10.0, None)),  # lent, not yet admitted; whole seconds
        ([LENT_N1], K, None, LeaseTimes(admitted=15.0), (10.0, 15.0)),
        ([LENT_N1], K, K, DONE, (40.0, None)),  # finished, lease still on
        ([LENT_N1], K, None, LeaseTimes(admitted=9.0), (10.0, 10.0)),  # added when admitted
        ([LENT_N1, ENDED_N1], S, S, DONE, (40.0, None)),  # the way back began at the finish
        ([LENT_N1, ENDED_N1], S, S, LeaseTimes(), (41.0, None)),  # Workload gone
        ([LENT_N1, ENDED_N1, BACK_N1], S, None, DONE, (40.0, 47.0)),
        ([ENDED_N1, BACK_N1, Handover(50.0, "n1", LENT, "w2")], S, None, DONE, (None, None)),
        ([], S, S, LeaseTimes(), (None, None)),  # a new leader: its ticks tell
    ],
)
def test_transfer_times(
    stamps: list[Handover],
    owner: Side,
    moving: Side | None,
    lease: LeaseTimes,
    expected: tuple[float | None, float | None],
) -> None:
    latest = {h.kind: h for h in stamps}
    assert transfer_times(latest, owner, moving, lease) == expected


def test_a_lend_is_four_transfers() -> None:
    recorded = [
        LENT_N1,
        Handover(11.0, "n2", LENT, "w1"),
        Handover(41.0, "n1", LEASE_ENDED, "w1"),
        Handover(47.0, "n1", BACK, "w1"),
    ]
    assert lent_nodes(recorded) == {"w1": ["n1", "n2"]}
    events = handover_events(recorded[:1] + recorded[2:], {"w1": LeaseTimes(15.0, 40.0)})
    assert events == [
        NodeTransferBegan(10.0, "n1", K),
        NodeTransferEnded(15.0, "n1", K),
        NodeTransferBegan(40.0, "n1", K),
        NodeTransferBegan(41.0, "n1", S),
        NodeTransferEnded(47.0, "n1", S),
    ]


def _event(reason: str, t: float, node: str, lease: str = "", **extra: Any) -> dict[str, Any]:
    annotations = {wk.ANNOTATION_NODE: node, **({wk.ANNOTATION_LEASE: lease} if lease else {})}
    return {
        "metadata": {"name": f"{node}.{reason}", "annotations": annotations},
        "reason": reason,
        "reportingComponent": wk.FIELD_MANAGER,
        "eventTime": at(t).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        **extra,
    }


def test_the_cli_recomputes_a_lend_from_workloads_and_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = {"nodes": [{"name": "n1", "state": ["IDLE"], "gres": "gpu:8"}]}
    raw = workload("w1", created=1000, admitted=1010, pods=1, gpus=8)
    files = {
        "jobs": {"jobs": []},
        "nodes": nodes,
        "workloads": {"items": [raw]},
        "events": {
            "items": [
                _event(LENT, 1002.5, "n1", "w1"),
                _event(LEASE_ENDED, 1030.0, "n1", "w1"),
                _event(BACK, 1034.5, "n1", "w1"),
                _event(LENT, 1003.0, "other-cluster-node", "w9"),
                {**_event(LENT, 1001.0, "n1", "w0"), "reportingComponent": "someone-else"},
            ]
        },
    }
    argv = ["goodput", "--check", CHECK, "--from", "1000", "--to", "1040"]
    for name, doc in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
        argv += [f"--{name}", str(tmp_path / f"{name}.json")]
    assert main(argv) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    # Queued 1000-1002 (fragmentation), on its way 1002-1010 (the handovers in whole
    # seconds, as Kueue's times); the workload holds its node to the window's end.
    assert out["gpu_seconds"]["fragmentation"] == pytest.approx(8 * 2)
    assert out["gpu_seconds"]["reserved_in_transfer"] == pytest.approx(8 * 8)
    assert out["gpu_seconds"]["allocated"] == pytest.approx(8 * 30)
    assert out["waits_s"] == {"8-63": [10.0]}

    assert main(argv[:1] + argv[3:]) == 2
    assert "--workloads needs --check" in capsys.readouterr().err
    files["events"]["items"][0]["eventTime"] = "yesterday"  # type: ignore[index]
    (tmp_path / "events.json").write_text(json.dumps(files["events"]))
    assert main(argv) == 2
    assert "Event n1.Lent eventTime" in capsys.readouterr().err
