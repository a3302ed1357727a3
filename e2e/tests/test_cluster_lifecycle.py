"""`cluster-up` is idempotent and `cluster-down` leaves no process or port behind.

Run on a second, throw-away control plane (own runtime folder, own ports), so
the session's cluster keeps serving the other tests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurmkube_e2e import processes
from slurmkube_e2e.cluster import LocalCluster
from slurmkube_e2e.fleet import FLEET_LABEL, FleetSpec
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.layout import Layout, Ports

pytestmark = pytest.mark.e2e

# Between the slots' port ranges (SLURMKUBE_SLOT shifts by 100 each), so the spare
# cluster never collides with another checkout's cluster on this machine.
PORT_SHIFT = 50


def _shifted(ports: Ports) -> Ports:
    return Ports(**{k: v + PORT_SHIFT for k, v in dataclasses.asdict(ports).items()})


@pytest.fixture
def spare_cluster(tmp_path: Path, kubeconfig: Path) -> LocalCluster:
    base = Layout.from_env()
    if kubeconfig.resolve() != base.kubeconfig.resolve():
        pytest.skip("cluster-up/cluster-down are the local control plane's (not kind's)")
    if not base.k8s_binary.exists():
        pytest.fail("no local control plane build: run `make cluster-build`")
    layout = dataclasses.replace(base, run=tmp_path / "run", ports=_shifted(base.ports))
    return LocalCluster(layout)


def _pids(cluster: LocalCluster) -> dict[str, int | None]:
    return {c.process.name: processes.running_pid(c.process) for c in cluster.components()}


def test_up_twice_then_down_leaves_no_process_and_no_port(spare_cluster: LocalCluster) -> None:
    layout = spare_cluster.layout
    ports = list(layout.ports.all().values())
    spec = FleetSpec(name="spare", nvl_domains=1, nodes_per_domain=2)
    try:
        spare_cluster.up(spec)
        first = _pids(spare_cluster)
        assert all(first.values()), first
        served = {c.port for c in spare_cluster.components()}
        assert served <= set(processes.listening_ports(ports))

        spare_cluster.up(spec)  # a second up finds everything running and keeps it
        assert _pids(spare_cluster) == first
        nodes = Kube(layout.kubeconfig).list("v1", "Node", label_selector=f"{FLEET_LABEL}=spare")
        assert len(nodes) == 2
    finally:
        spare_cluster.down()

    assert processes.listening_ports(ports) == []
    for name, pid in first.items():
        assert pid is not None and not processes.alive(pid), f"{name} (pid {pid}) still runs"
    assert not layout.etcd_data.exists()
