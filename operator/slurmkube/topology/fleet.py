"""Kubernetes Node objects -> the fleet as Slurm needs to see it.

One `FleetNode` per Kubernetes node, with every value already validated for a
Slurm file: its name (Slurm node name = Kubernetes node name, DESIGN.md §5),
GPUs, CPUs and memory from the node's allocatable resources, and the labels
that carry topology.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from operator import attrgetter
from typing import Any, Final

from slurmkube.api import grammar
from slurmkube.api import well_known as wk
from slurmkube.api.documents import ClusterBundle
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.api.models import KubeNode


@dataclass(frozen=True, slots=True)
class FleetNode:
    name: SlurmToken
    gpus: int
    gpu_type: SlurmToken | None
    cpus: int
    memory_mib: int
    labels: Mapping[str, str]
    ready: bool
    # The name's natural order (`sort_key`), made once per node change: every
    # config sorts the whole fleet more than once.
    order: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", sort_key(self.name))

    def label(self, key: str) -> str | None:
        return self.labels.get(key)


_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?")


@lru_cache(maxsize=4096)
def _quantity(value: str) -> Decimal | None:
    match = _QUANTITY.fullmatch(value.strip())
    if not match:
        return None
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:  # pragma: no cover - the regex already constrains it
        return None
    return number * Decimal(_SUFFIXES.get(match.group(2) or "", 1))  # type: ignore[arg-type]


def parse_quantity(value: str, where: str) -> Decimal:
    """A Kubernetes resource.Quantity ("144", "500m", "2Ti", "1048576Ki") as a number."""
    number = _quantity(value)
    if number is None:
        raise InvalidValue(where, value, "a Kubernetes quantity such as 8, 500m, 64Gi")
    return number


def gpu_type_from_product(product: str) -> str:
    """`NVIDIA-GB200` -> `gb200`, `NVIDIA-H100-80GB-HBM3` -> `h100-80gb-hbm3`.

    Label values are already [A-Za-z0-9_.-]; Slurm GRES types are matched
    case-sensitively, so lowercase them once here and everyone agrees.
    """
    lowered = product.lower()
    return lowered.removeprefix("nvidia-") or lowered


def gpu_count(node: KubeNode) -> int:
    """GPUs the node offers: allocatable, else capacity, else GFD's count label."""
    return _gpus(node, f"Node {node.metadata.name}")


def _gpus(node: KubeNode, where: str) -> int:
    for source, mapping in (
        ("status.allocatable", node.status.allocatable),
        ("status.capacity", node.status.capacity),
    ):
        if wk.RESOURCE_GPU in mapping:
            value = parse_quantity(mapping[wk.RESOURCE_GPU], f"{where} {source}[{wk.RESOURCE_GPU}]")
            return int(value)
    count = node.metadata.labels.get(wk.LABEL_GPU_COUNT)
    if count is None:
        return 0
    if not count.isdigit():
        raise InvalidValue(f"{where} label {wk.LABEL_GPU_COUNT}", count, "a whole number")
    return int(count)


def _resource(node: KubeNode, key: str, where: str) -> Decimal:
    mapping = node.status.allocatable or node.status.capacity
    raw = mapping.get(key)
    if raw is None:
        raise InvalidValue(f"{where} status.allocatable[{key}]", "", f"the node's {key}")
    return parse_quantity(raw, f"{where} status.allocatable[{key}]")


def fleet_node(node: KubeNode) -> FleetNode:
    """Converted once per node change (it depends on the Node object alone), so a
    re-render after one label change does not re-read 10,000 Node objects."""
    where = f"Node {node.metadata.name}"
    name = grammar.hostname(node.metadata.name, f"{where} metadata.name")
    gpus = _gpus(node, where)
    product = node.metadata.labels.get(wk.LABEL_GPU_PRODUCT)
    gpu_type = (
        grammar.gres_type(gpu_type_from_product(product), f"{where} label {wk.LABEL_GPU_PRODUCT}")
        if product and gpus
        else None
    )
    cpus = max(1, int(_resource(node, "cpu", where)))
    memory_mib = int(_resource(node, "memory", where) / 2**20)
    return FleetNode(
        name=name,
        gpus=gpus,
        gpu_type=gpu_type,
        cpus=cpus,
        memory_mib=memory_mib,
        labels=node.metadata.labels,
        ready=node.ready and not node.spec.unschedulable,
    )


@lru_cache(maxsize=1 << 17)
def sort_key(name: str) -> tuple[object, ...]:
    """Natural order: gpu-2 before gpu-10, so output reads like Slurm's hostlists."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


_ORDER = attrgetter("order")


def sorted_nodes(nodes: Iterable[FleetNode]) -> list[FleetNode]:
    return sorted(nodes, key=_ORDER)


def as_fleet(nodes: Iterable[KubeNode | FleetNode]) -> list[FleetNode]:
    """Kubernetes nodes (converted) or already converted fleet nodes, in natural order."""
    return sorted_nodes(n if isinstance(n, FleetNode) else fleet_node(n) for n in nodes)


# Labels every config reads, whatever the spec: what a FleetNode is made of
# (GPU product, count, NVLink domain) and what takes a node away from Slurm.
FLEET_LABELS: Final = frozenset(
    {wk.LABEL_GPU_CLIQUE, wk.LABEL_GPU_PRODUCT, wk.LABEL_GPU_COUNT, wk.LABEL_LEASE}
)


def config_label_keys(bundle: ClusterBundle) -> frozenset[str]:
    """The Node label keys one SlurmCluster's config reads: its topology labels,
    its NodeSets' and partitions' selectors, and `FLEET_LABELS`.

    Any other label (GPU feature discovery's `nvidia.com/gfd.timestamp`,
    rewritten on every node each interval) cannot change the config, so a
    change to it triggers no reconcile.
    """
    spec = bundle.cluster.spec
    keys = set(FLEET_LABELS)
    keys.add(spec.topology.nvlink_domain_label)
    keys.update(spec.topology.tier_labels)
    selectors = [ns.spec.node_selector for ns in bundle.node_sets]
    selectors += [p.node_selector for p in spec.partitions if p.node_selector is not None]
    for selector in selectors:
        keys.update(selector.match_labels)
        keys.update(req.key for req in selector.match_expressions)
    return frozenset(keys)


def node_signals(raw: Mapping[str, Any], signal_keys: Collection[str]) -> tuple[object, ...]:
    """The Node's conditions whose type, and taints whose key, is in `signal_keys`
    (what node health rules read), without their timestamps."""
    if not signal_keys:
        return ()
    conditions = (raw.get("status") or {}).get("conditions") or []
    taints = (raw.get("spec") or {}).get("taints") or []
    return (
        tuple(
            sorted(
                (c.get("type"), c.get("status")) for c in conditions if c.get("type") in signal_keys
            )
        ),
        tuple(
            sorted(
                (t.get("key"), t.get("value") or "", t.get("effect"))
                for t in taints
                if t.get("key") in signal_keys
            )
        ),
    )


def node_fingerprint(
    raw: Mapping[str, Any],
    label_keys: Collection[str] | None = None,
    signal_keys: Collection[str] = (),
) -> int:
    """A digest of what the reconcile reads from a Node object: the labels in
    `label_keys` (all labels when None), schedulability, resources and readiness.

    Kubelets (and kwok) rewrite their Node every few seconds for heartbeats
    (condition timestamps, resourceVersion), and label daemons rewrite labels no
    config reads. Those events leave this digest alone, so the Node watcher
    marks clusters dirty only for changes that can move a node between
    NodeSets, blocks or switches. `signal_keys` adds the conditions and taints
    node health rules read (`node_signals`); a condition's heartbeat does not
    change its status, so it still changes nothing.
    """
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    ready = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    resources = hash(
        (
            tuple(sorted((status.get("allocatable") or {}).items())),
            tuple(sorted((status.get("capacity") or {}).items())),
        )
    )
    rest = hash((bool(spec.get("unschedulable")), ready, node_signals(raw, signal_keys)))
    # Low bits: the labels' part (so `relabelled` can replace it alone), then the
    # resources': together, what a config is made from (`config_part`).
    return (
        (rest << 2 * _LABEL_BITS)
        | ((resources & _LABEL_MASK) << _LABEL_BITS)
        | label_fingerprint(meta.get("labels") or {}, label_keys)
    )


_LABEL_BITS = 32
_LABEL_MASK = (1 << _LABEL_BITS) - 1


def config_part(fingerprint: int | None) -> int | None:
    """What of a `node_fingerprint` a config reads: the labels and resources, not
    readiness, cordon or health signals (those place slurmd pods, not lines)."""
    return None if fingerprint is None else fingerprint & ((1 << 2 * _LABEL_BITS) - 1)


def label_fingerprint(labels: Mapping[str, str], label_keys: Collection[str] | None) -> int:
    """The labels' part of `node_fingerprint`: those in `label_keys` (all when None)."""
    if label_keys is not None:
        labels = {k: v for k, v in labels.items() if k in label_keys}
    return hash(tuple(sorted(labels.items()))) & _LABEL_MASK


def relabelled(
    seen: dict[str, int],
    labels: Mapping[str, Mapping[str, str]],
    label_keys: Collection[str] | None,
) -> None:
    """`seen` (node_changed's memory) after the label keys the configs read changed:
    each node's labels' part made again with the new keys from `labels` (each
    node's labels as the reconcile that made the new keys read them). Without
    it, each node's next event would count once, whatever it changed: a fleet's
    heartbeats or a label no config reads, node after node, for minutes."""
    for name, node_labels in labels.items():
        fingerprint = seen.get(name)
        if fingerprint is not None:
            label_part = label_fingerprint(node_labels, label_keys)
            seen[name] = (fingerprint & ~_LABEL_MASK) | label_part


def node_changed(
    seen: dict[str, int],
    event_type: str | None,
    raw: Mapping[str, Any],
    label_keys: Collection[str] | None = None,
) -> bool:
    """Whether a Node watch event changed what `node_fingerprint` digests (or the node
    went); `seen` is the watcher's memory of each node's last fingerprint, updated."""
    name = (raw.get("metadata") or {}).get("name", "")
    if event_type == "DELETED":
        seen.pop(name, None)
        return True
    fingerprint = node_fingerprint(raw, label_keys)
    if seen.get(name) == fingerprint:
        return False
    seen[name] = fingerprint
    return True
