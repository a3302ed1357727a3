"""Kueue's own manifests, rewritten for a Kueue that runs as a local process.

Upstream ships Kueue's webhooks and CRD conversion webhooks pointing at an
in-cluster Service, and Kueue's internal cert manager keeps a CA and serving
certificate in a Secret, injects the CA into those objects and blocks start-up
until it has. Here Kueue is a process on 127.0.0.1, so the same manifests get a
loopback `url`, and the Secret is pre-filled with a CA and certificate we made
(valid for the Service name *and* 127.0.0.1); the cert manager finds them valid,
keeps them, injects the same CA and lets Kueue start. (With the cert manager
off, Kueue v0.19 reads its metrics certificate from a fixed /etc path.)

The manifests are read from Kueue's Go module (config/components), never
copied, so a version bump picks up new webhooks and CRD fields. Pure: no I/O
besides reading those files.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from slurmkube.api.allocation_source import AllocationSourceSpec
from slurmkube.plan.policy.kueue import admission_fair_sharing

Manifest = dict[str, Any]

KUEUE_NAMESPACE = "kueue-system"
# Names Kueue's cert manager derives its webhook configuration names from
# ("<base>-webhook-service" -> "<base>-(mutating|validating)-webhook-configuration").
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"

# Integrations we turn on, and the webhook path fragment that belongs to each
# (paths are kubebuilder's /mutate-<group>-<version>-<kind> with dots as dashes).
FRAMEWORK_WEBHOOK_PATHS: dict[str, str] = {
    "batch/job": "-batch-v1-job",
    "pod": "--v1-pod",
    "jobset.x-k8s.io/jobset": "-jobset-x-k8s-io-",
}
# Kueue's own kinds (ClusterQueue, Workload, ...) always have webhooks.
KUEUE_WEBHOOK_PATH = "-kueue-x-k8s-io-"
# Job webhooks skip these namespaces, as upstream's kustomization does for them.
EXCLUDED_NAMESPACES = ("kube-system", KUEUE_NAMESPACE)


def load_yaml_documents(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _ca_bundle(ca_pem: bytes) -> str:
    return base64.b64encode(ca_pem).decode()


def conversion_webhook_crds(kustomization: Manifest) -> set[str]:
    """CRD plural names upstream enables a conversion webhook for (patches/webhook_in_<plural>)."""
    names: set[str] = set()
    for patch in kustomization.get("patches") or []:
        stem = Path(str(patch.get("path", ""))).stem
        if stem.startswith("webhook_in_"):
            names.add(stem.removeprefix("webhook_in_"))
    return names


def render_crds(crd_dir: Path, base_url: str, ca_pem: bytes) -> list[Manifest]:
    """Kueue's CRDs from config/components/crd, with conversion webhooks at base_url."""
    kustomization = load_yaml_documents(crd_dir / "kustomization.yaml")[0]
    converted = conversion_webhook_crds(kustomization)
    crds: list[Manifest] = []
    for path in sorted((crd_dir / "bases").glob("*.yaml")):
        for crd in load_yaml_documents(path):
            if crd["spec"]["names"]["plural"] in converted:
                crd["spec"]["conversion"] = conversion_webhook(base_url, ca_pem)
            crds.append(crd)
    return crds


def conversion_webhook(base_url: str, ca_pem: bytes) -> Manifest:
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": f"{base_url}/convert", "caBundle": _ca_bundle(ca_pem)},
            "conversionReviewVersions": ["v1"],
        },
    }


def render_webhook_configurations(
    manifests: Iterable[Manifest], base_url: str, ca_pem: bytes, frameworks: Sequence[str]
) -> list[Manifest]:
    """Kueue's (Mutating|Validating)WebhookConfigurations for the enabled frameworks.

    Webhooks of frameworks that are off are dropped: Kueue registers no handler
    for them, and a configured webhook without a handler would reject requests.
    """
    unknown = sorted(set(frameworks) - FRAMEWORK_WEBHOOK_PATHS.keys())
    if unknown:
        raise ValueError(
            f"unknown Kueue frameworks {unknown}; known: {sorted(FRAMEWORK_WEBHOOK_PATHS)}"
        )
    wanted = [FRAMEWORK_WEBHOOK_PATHS[f] for f in frameworks]
    rendered: list[Manifest] = []
    for manifest in manifests:
        config = copy.deepcopy(manifest)
        config["metadata"] = {"name": f"kueue-{manifest['metadata']['name']}"}
        webhooks = []
        for hook in config.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            if KUEUE_WEBHOOK_PATH in path:
                pass
            elif any(fragment in path for fragment in wanted):
                hook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": list(EXCLUDED_NAMESPACES),
                        }
                    ]
                }
            else:
                continue
            hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": _ca_bundle(ca_pem)}
            webhooks.append(hook)
        config["webhooks"] = webhooks
        rendered.append(config)
    return rendered


def render_cert_secret(ca_crt: bytes, ca_key: bytes, tls_crt: bytes, tls_key: bytes) -> Manifest:
    """The Secret Kueue's cert manager reads (cert-controller's ca.crt/ca.key/tls.crt/tls.key)."""
    data = {"ca.crt": ca_crt, "ca.key": ca_key, "tls.crt": tls_crt, "tls.key": tls_key}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": WEBHOOK_SECRET, "namespace": KUEUE_NAMESPACE},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


DEFAULT_HALF_LIFE_HOURS: int = AllocationSourceSpec.model_fields["half_life_hours"].default


def render_configuration(
    *,
    webhook_port: int,
    cert_dir: Path,
    metrics_address: str,
    health_address: str,
    frameworks: Sequence[str],
    host: str = "127.0.0.1",
) -> Manifest:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a local process."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": health_address},
        "metrics": {"bindAddress": metrics_address},
        "webhook": {"port": webhook_port, "host": host, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        # The visibility API server would need an APIService and a fixed cert path.
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {"frameworks": list(frameworks)},
        # The allocation policy's part at its default half-life (docs/policy.md): its
        # ClusterQueues admit by usage. Kueue's fairSharing stays off: it would
        # reorder every cohort of the suite, not only the policy's.
        "admissionFairSharing": admission_fair_sharing(DEFAULT_HALF_LIFE_HOURS),
    }
