"""One small synchronous client over the official `kubernetes` package.

Controllers call it from threads (`asyncio.to_thread`), so kopf's event loop
never blocks on the API server.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from slurmkube.api import well_known as wk

Manifest = dict[str, Any]


def load_config(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials in a pod, else the kubeconfig (KUBECONFIG or the given path)."""
    if kubeconfig is None:
        with contextlib.suppress(k8s_config.ConfigException):
            k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
            return k8s.ApiClient()
    k8s_config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    return k8s.ApiClient()


class Kube:
    def __init__(self, api: k8s.ApiClient) -> None:
        self.api = api
        self.dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]
        self.core = k8s.CoreV1Api(api)

    def _resource(self, api_version: str, kind: str) -> Any:
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, manifest: Manifest, owner: Manifest | None = None) -> Manifest:
        """Server-side apply with our field manager; owner gets an ownerReference."""
        body = dict(manifest)
        if owner is not None:
            meta = dict(body["metadata"])
            meta["ownerReferences"] = [owner_reference(owner)]
            body["metadata"] = meta
        result = self._resource(body["apiVersion"], body["kind"]).server_side_apply(
            body=body,
            name=body["metadata"]["name"],
            namespace=body["metadata"].get("namespace"),
            field_manager=wk.FIELD_MANAGER,
            force_conflicts=True,
        )
        return dict(result.to_dict())

    def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> Manifest | None:
        try:
            return dict(
                self._resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
            )
        except NotFoundError:
            return None

    def list(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str = ""
    ) -> list[Manifest]:
        # serialize=False: the raw JSON, not the dynamic client's ResourceInstance,
        # whose per-field wrapping costs seconds for a list of 1,000 Nodes.
        response = self._resource(api_version, kind).get(
            namespace=namespace, label_selector=label_selector or None, serialize=False
        )
        items: list[Manifest] = json.loads(response.data)["items"]
        for item in items:  # list items come without these; callers read them
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def iter_items(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str = "",
        page_size: int = 500,
    ) -> Iterator[Manifest]:
        """Like `list`, one page at a time (limit/continue): a caller that keeps only
        what it needs of each item never holds the whole list. 10,000 Nodes parsed at
        once cost the operator hundreds of MB that Python does not give back."""
        token: str | None = None
        while True:
            response = self._resource(api_version, kind).get(
                namespace=namespace,
                label_selector=label_selector or None,
                limit=page_size,
                _continue=token,
                serialize=False,
            )
            page = json.loads(response.data)
            for item in page["items"]:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                yield item
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> None:
        with contextlib.suppress(NotFoundError):
            self._resource(api_version, kind).delete(name=name, namespace=namespace)

    def create_if_absent(self, manifest: Manifest, owner: Manifest | None = None) -> bool:
        """Create, or leave an existing object alone (generated keys are made once)."""
        body = dict(manifest)
        if owner is not None:
            body["metadata"] = {**body["metadata"], "ownerReferences": [owner_reference(owner)]}
        try:
            self._resource(body["apiVersion"], body["kind"]).create(
                body=body, namespace=body["metadata"].get("namespace")
            )
        except ConflictError:
            return False
        return True

    def patch_status(
        self, api_version: str, kind: str, name: str, namespace: str, status: Manifest
    ) -> None:
        resource = self._resource(api_version, kind).subresources["status"]
        resource.patch(
            body={"status": status},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        )

    def apply_status(self, manifest: Manifest, field_manager: str) -> None:
        """Server-side apply of the status subresource: only the fields in `manifest`
        are claimed by `field_manager`; other managers' fields (Kueue's) stay theirs."""
        meta = manifest["metadata"]
        resource = self._resource(manifest["apiVersion"], manifest["kind"]).subresources["status"]
        resource.server_side_apply(
            body=manifest,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=field_manager,
            force_conflicts=True,
        )

    def set_node_label(self, name: str, key: str, value: str | None) -> None:
        """Set (or with None remove) one label of a Node, by JSON merge patch."""
        with contextlib.suppress(NotFoundError):
            self._resource("v1", "Node").patch(
                body={"metadata": {"labels": {key: value}}},
                name=name,
                content_type="application/merge-patch+json",
            )

    def set_node_taints(self, name: str, taints: Sequence[Manifest], resource_version: str) -> bool:
        """Replace a Node's taints, only if it is still at `resource_version`: the list
        is one value to the API server (no merge key), so a taint another writer
        added since the read must not be lost. False: changed or gone since."""
        try:
            self._resource("v1", "Node").patch(
                body={
                    "metadata": {"resourceVersion": resource_version},
                    "spec": {"taints": list(taints)},
                },
                name=name,
                content_type="application/merge-patch+json",
            )
        except (ConflictError, NotFoundError):
            return False
        return True

    def merge_patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: Manifest
    ) -> None:
        """A JSON merge patch of any object (a None value removes a key)."""
        self._resource(api_version, kind).patch(
            body=patch, name=name, namespace=namespace, content_type="application/merge-patch+json"
        )

    def annotate(
        self, api_version: str, kind: str, name: str, namespace: str | None, annotations: Manifest
    ) -> None:
        """Set annotations of any object (merge patch; a None value removes one)."""
        self.merge_patch(
            api_version, kind, name, namespace, {"metadata": {"annotations": annotations}}
        )

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        """Set one annotation of a Pod (merge patch); a missing pod is left alone.
        The same value again is a no-op for the API server: no new resourceVersion."""
        self.merge_patch_pod(namespace, name, {"metadata": {"annotations": {key: value}}})

    def merge_patch_pod(self, namespace: str, name: str, patch: Manifest) -> None:
        """A JSON merge patch of a Pod (its labels, say); a missing pod is left alone."""
        with contextlib.suppress(NotFoundError):
            self.merge_patch("v1", "Pod", name, namespace, patch)

    def patch_pod_conditions(
        self, namespace: str, name: str, conditions: Sequence[Manifest]
    ) -> None:
        """Strategic merge on pods/status: conditions merge by type, others' stay."""
        with contextlib.suppress(NotFoundError, k8s.ApiException):
            self.core.patch_namespaced_pod_status(
                name, namespace, {"status": {"conditions": list(conditions)}}
            )

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None:
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise
        data = (secret.data or {}).get(key)
        return base64.b64decode(data) if data else None

    def event(
        self,
        involved: Manifest,
        reason: str,
        message: str,
        warning: bool = False,
        *,
        record: EventRecord | None = None,
    ) -> None:
        """A core/v1 Event on an object (what `kubectl describe` shows); with a record,
        also its time to the microsecond and annotations, for readers after the fact."""
        meta = involved["metadata"]
        now = dt.datetime.now(dt.UTC)
        extra: dict[str, Any] = {}
        if record is not None:
            at = dt.datetime.fromtimestamp(record.at, dt.UTC)
            # MicroTime wants exactly six digits (the client's isoformat drops zeros).
            extra = {
                "event_time": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "action": record.action,
                "reporting_component": wk.FIELD_MANAGER,
                "reporting_instance": record.instance[:128],
            }
        body = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(
                generate_name=f"{meta['name']}.",
                namespace=wk.namespace_or_default(meta.get("namespace")),
                annotations=dict(record.annotations) if record is not None else None,
            ),
            involved_object=k8s.V1ObjectReference(
                api_version=involved.get("apiVersion"),
                kind=involved.get("kind"),
                name=meta["name"],
                namespace=meta.get("namespace"),
                uid=meta.get("uid"),
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=k8s.V1EventSource(component=wk.FIELD_MANAGER),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            **extra,
        )
        with contextlib.suppress(k8s.ApiException):
            self.core.create_namespaced_event(wk.namespace_or_default(meta.get("namespace")), body)


@dataclass(frozen=True)
class EventRecord:
    """What makes an Event a record: its exact time, what was done, by which replica."""

    at: float
    action: str
    instance: str
    annotations: Mapping[str, str] = field(default_factory=dict)


def owner_reference(owner: Manifest) -> Manifest:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
