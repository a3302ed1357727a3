"""spec.health: what a SlurmCluster accepts, what it refuses (naming the field), the CRD."""

from __future__ import annotations

from typing import Any

import pytest

from slurmkube.api import grammar
from slurmkube.api.crd import crds
from slurmkube.api.documents import DocumentError, parse_cluster
from slurmkube.api.models import HealthSpec, KubeNode
from slurmkube_local.builders import cluster_docs


def cluster_with_health(health: dict[str, Any]) -> HealthSpec:
    return parse_cluster(cluster_docs(extra={"health": health})).cluster.spec.health


def test_defaults_have_no_rules_and_the_documented_limits() -> None:
    spec = parse_cluster(cluster_docs()).cluster.spec.health
    assert spec.rules == []
    assert (spec.circuit_breaker.max_sick_share, spec.circuit_breaker.window_seconds) == (0.5, 300)
    assert spec.rack_escalation.domain_sick_share == 0.5
    assert spec.recovery.active_check
    assert (spec.recovery.failures_before_hold, spec.recovery.window_seconds) == (2, 3600)


def test_rules_map_conditions_and_taints_to_severities() -> None:
    spec = cluster_with_health(
        {
            "rules": [
                {"condition": {"type": "GpuXidError"}, "severity": "fatal"},
                {"condition": {"type": "GpuHealth", "status": "False"}, "severity": "drain"},
                {
                    "taint": {"key": "nvidia.com/gpu-error", "effect": "NoSchedule"},
                    "severity": "drain",
                },
            ]
        }
    )
    condition = spec.rules[0].condition
    assert condition is not None and (condition.type, condition.status) == ("GpuXidError", "True")
    taint = spec.rules[2].taint
    assert taint is not None and (taint.key, taint.value) == ("nvidia.com/gpu-error", None)


@pytest.mark.parametrize(
    ("health", "field"),
    [
        pytest.param(
            {"rules": [{"severity": "fatal"}]}, "spec.health.rules.0", id="a-rule-without-a-signal"
        ),
        pytest.param(
            {
                "rules": [
                    {
                        "condition": {"type": "X"},
                        "taint": {"key": "y"},
                        "severity": "drain",
                    }
                ]
            },
            "spec.health.rules.0",
            id="a-rule-with-two-signals",
        ),
        pytest.param(
            {"rules": [{"condition": {"type": "Gpu=Bad"}, "severity": "drain"}]},
            "spec.health.rules.0.condition.type",
            id="a-condition-type-that-would-inject-a-key",
        ),
        pytest.param(
            {"rules": [{"taint": {"key": "k", "value": "a b"}, "severity": "drain"}]},
            "spec.health.rules.0.taint.value",
            id="a-taint-value-with-a-space",
        ),
        pytest.param(
            {"rules": [{"condition": {"type": "X"}, "severity": "reboot"}]},
            "spec.health.rules.0.severity",
            id="an-unknown-severity",
        ),
        pytest.param(
            {"circuitBreaker": {"maxSickShare": 1.5}},
            "spec.health.circuitBreaker.maxSickShare",
            id="a-share-above-one",
        ),
        pytest.param(
            {"rackEscalation": {"domainSickShare": 0}},
            "spec.health.rackEscalation.domainSickShare",
            id="a-domain-share-of-zero",
        ),
        pytest.param(
            {"recovery": {"failuresBeforeHold": 0}},
            "spec.health.recovery.failuresBeforeHold",
            id="hold-before-any-failure",
        ),
    ],
)
def test_bad_health_input_names_the_field(health: dict[str, Any], field: str) -> None:
    with pytest.raises(DocumentError, match=rf"SlurmCluster test: {field}"):
        cluster_with_health(health)


def test_every_condition_type_the_schema_accepts_is_safe_in_a_node_reason() -> None:
    spec = cluster_with_health(
        {"rules": [{"condition": {"type": "nvidia.com/Gpu_XID.error-1"}, "severity": "drain"}]}
    )
    condition = spec.rules[0].condition
    assert condition is not None
    assert grammar.node_reason(f"slurmkube:health: fatal {condition.type}") is not None


def test_the_crd_carries_the_one_signal_rule_and_openapi_exclusive_bounds() -> None:
    schema = crds()["slurmkube.io_slurmclusters.yaml"]["spec"]["versions"][0]["schema"]
    health = schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["health"]
    rule = health["properties"]["rules"]["items"]
    assert rule["x-kubernetes-validations"][0]["rule"] == "has(self.condition) != has(self.taint)"
    share = health["properties"]["rackEscalation"]["properties"]["domainSickShare"]
    # OpenAPI v3 (what the API server reads): exclusiveMinimum is a flag beside minimum.
    assert (share["minimum"], share["exclusiveMinimum"]) == (0, True)


def test_node_taints_are_read_and_a_taint_without_effect_is_refused() -> None:
    node = KubeNode.model_validate(
        {
            "metadata": {"name": "g-1"},
            "spec": {"taints": [{"key": "nvidia.com/gpu-error", "effect": "NoSchedule"}]},
        }
    )
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        ("nvidia.com/gpu-error", "", "NoSchedule")
    ]
    with pytest.raises(ValueError, match="effect"):
        KubeNode.model_validate({"metadata": {"name": "g-1"}, "spec": {"taints": [{"key": "k"}]}})
