# mypy: allow-untyped-calls
"""A small typed face over the Kubernetes dynamic client, for the e2e tooling and tests.

Tests speak in plain manifests (dicts), the way a user writes YAML, for any
kind including CRDs created a moment earlier; the dynamic client does that but
is untyped, so it is wrapped here once (hence the file-level mypy setting) and
everything else stays strictly typed. Writes use server-side apply so a test
that re-applies an object states intent instead of diffing it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from kubernetes import config, dynamic
from kubernetes.client import ApiClient, VersionApi
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError
from kubernetes.dynamic.resource import Resource

Manifest = dict[str, Any]
FIELD_MANAGER = "slurmkube-e2e"


class Kube:
    """A client for one cluster, from a kubeconfig file."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.api_client: ApiClient = config.new_client_from_config(config_file=str(kubeconfig))
        self._dynamic = dynamic.DynamicClient(self.api_client)

    def resource(self, api_version: str, kind: str) -> Resource:
        """The API resource for a kind; rediscovers once, so just-created CRDs are found."""
        try:
            found: Resource = self._dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            self._dynamic.resources.invalidate_cache()
            found = self._dynamic.resources.get(api_version=api_version, kind=kind)
        return found

    def _for(self, manifest: Manifest) -> Resource:
        return self.resource(manifest["apiVersion"], manifest["kind"])

    def apply(self, manifest: Manifest, namespace: str | None = None) -> Manifest:
        """Server-side apply; namespace defaults to the manifest's own."""
        ns = namespace or manifest.get("metadata", {}).get("namespace")
        result = self._for(manifest).server_side_apply(
            body=manifest,
            name=manifest["metadata"]["name"],
            namespace=ns,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        return dict(result.to_dict())

    def create(
        self, manifest: Manifest, namespace: str | None = None, dry_run: str | None = None
    ) -> Manifest:
        """Create; dry_run="All" runs admission (webhooks included) without persisting."""
        ns = namespace or manifest.get("metadata", {}).get("namespace")
        extra = {"dry_run": dry_run} if dry_run else {}
        result = self._for(manifest).create(body=manifest, namespace=ns, **extra)
        return dict(result.to_dict())

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Manifest | None:
        try:
            obj = self.resource(api_version, kind).get(name=name, namespace=namespace)
        except NotFoundError:
            return None
        return dict(obj.to_dict())

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Manifest]:
        result = self.resource(api_version, kind).get(
            namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [dict(item) for item in result.to_dict()["items"]]

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        propagation: str = "Background",
    ) -> None:
        """Delete if present; propagation is Kubernetes' (Background, Foreground, Orphan)."""
        with contextlib.suppress(NotFoundError):
            self.resource(api_version, kind).delete(
                name=name,
                namespace=namespace,
                body={"propagationPolicy": propagation},
            )

    def patch_status(self, api_version: str, kind: str, name: str, patch: Manifest) -> Manifest:
        """Merge-patch the status subresource (e.g. a Node's allocatable)."""
        status = self.resource(api_version, kind).subresources["status"]
        result = status.patch(body=patch, name=name, content_type="application/merge-patch+json")
        return dict(result.to_dict())

    def patch(
        self, api_version: str, kind: str, name: str, patch: Manifest, namespace: str | None = None
    ) -> Manifest:
        result = self.resource(api_version, kind).patch(
            body=patch,
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        )
        return dict(result.to_dict())

    def server_version(self) -> str:
        return str(VersionApi(self.api_client).get_code().git_version)
