"""Rendering Kueue's upstream manifests for a local process (no cluster needed; reads
Kueue's module from the Go module cache, which `make cluster-build` fills)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkube_e2e import kueue, kwok
from slurmkube_e2e.layout import Layout, go_module_dir, read_versions

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
BASE = "https://127.0.0.1:29443"
# What Kueue v0.19's cert manager injects a CA into (pkg/util/cert): the CRDs we
# give a conversion webhook must be exactly these, or it blocks start-up.
ROTATOR_CRDS = {"localqueues", "clusterqueues", "workloads", "cohorts", "multikueueclusters"}


def _module(module: str, key: str) -> Path:
    versions = read_versions(Layout.from_env().versions_file)
    path = go_module_dir(module, versions[key])
    if not path.is_dir():
        pytest.fail(f"{path} missing: run `make cluster-build`")
    return path


@pytest.fixture(scope="module")
def kueue_dir() -> Path:
    return _module("sigs.k8s.io/kueue", "KUEUE_VERSION")


def test_conversion_webhooks_go_to_the_crds_kueue_injects(kueue_dir: Path) -> None:
    crds = kueue.render_crds(kueue_dir / "config/components/crd", BASE, CA)
    converted = {c["spec"]["names"]["plural"] for c in crds if "conversion" in c["spec"]}
    assert converted == ROTATOR_CRDS
    for crd in crds:
        if "conversion" in crd["spec"]:
            config = crd["spec"]["conversion"]["webhook"]["clientConfig"]
            assert config["url"] == f"{BASE}/convert"


def test_webhooks_only_for_enabled_frameworks_and_kueue_kinds(kueue_dir: Path) -> None:
    manifests = kueue.load_yaml_documents(kueue_dir / "config/components/webhook/manifests.yaml")
    rendered = kueue.render_webhook_configurations(manifests, BASE, CA, ["batch/job", "pod"])
    assert {m["metadata"]["name"] for m in rendered} == {
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    }
    paths = [h["clientConfig"]["url"] for m in rendered for h in m["webhooks"]]
    assert f"{BASE}/mutate-batch-v1-job" in paths
    assert f"{BASE}/mutate--v1-pod" in paths
    assert f"{BASE}/mutate-kueue-x-k8s-io-v1beta2-clusterqueue" in paths
    assert not [p for p in paths if "jobset" in p or "ray" in p or "apps-v1" in p]
    for hook in (h for m in rendered for h in m["webhooks"]):
        assert "service" not in hook["clientConfig"]
        if "kueue-x-k8s-io" not in hook["clientConfig"]["url"]:
            values = hook["namespaceSelector"]["matchExpressions"][0]["values"]
            assert "kube-system" in values


def test_unknown_framework_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match=r"ray\.io/rayjob"):
        kueue.render_webhook_configurations([], BASE, CA, ["ray.io/rayjob"])


def test_configuration_binds_everything_to_loopback() -> None:
    config = kueue.render_configuration(
        webhook_port=1,
        cert_dir=Path("/x"),
        metrics_address="127.0.0.1:2",
        health_address="127.0.0.1:3",
        frameworks=["batch/job"],
    )
    assert config["webhook"]["host"] == "127.0.0.1"
    assert config["metrics"]["bindAddress"].startswith("127.0.0.1:")
    assert config["health"]["healthProbeBindAddress"].startswith("127.0.0.1:")
    assert config["featureGates"]["VisibilityOnDemand"] is False
    # The allocation policy's usage-based admission, at its default half-life.
    assert config["admissionFairSharing"]["usageHalfLifeTime"] == "168h"
    assert "fairSharing" not in config


def test_kwok_job_pods_complete_after_their_annotated_runtime() -> None:
    stages = kwok.render_stages(_module("sigs.k8s.io/kwok", "KWOK_VERSION") / "kustomize/stage")
    assert kwok.POD_RUNTIME_ANNOTATION in stages
    assert "name: node-heartbeat-with-lease" in stages
