# mypy: allow-untyped-calls
"""The agent's calls to the API server, as plain JSON dicts.

The agent is a kubelet for a few nodes: it watches Pods and Services, reads
ConfigMaps and Secrets, writes pod status, Events, its Nodes and their Leases.
The typed kubernetes client would deserialize every watch event into models
the agent never uses, so every call here asks for the raw JSON
(`_preload_content=False`) and the watch function carries no return type.
Kept in one file because the client is untyped (hence the mypy setting).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kubernetes import config, watch
from kubernetes.client import CoordinationV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from slurmkube_runtime.layout import AGENT_NAME

Manifest = dict[str, Any]
REQUEST_TIMEOUT = 15


def _any(body: Manifest) -> Any:
    """A dict where the client's signature names a model: it serializes both alike."""
    return body


def _json(response: Any) -> Manifest:
    return dict(json.loads(response.data))


class Api:
    def __init__(self, kubeconfig: Path) -> None:
        client = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = CoreV1Api(client)
        self.coordination = CoordinationV1Api(client)

    # --- reads ---
    def list_all(self, kind: str) -> tuple[list[Manifest], str]:
        fn = self._lister(kind)
        data = _json(fn(_preload_content=False, _request_timeout=REQUEST_TIMEOUT))
        return list(data.get("items") or []), str(data["metadata"]["resourceVersion"])

    def _lister(self, kind: str) -> Callable[..., Any]:
        return {
            "Pod": self.core.list_pod_for_all_namespaces,
            "Service": self.core.list_service_for_all_namespaces,
        }[kind]

    def watch(
        self, kind: str, resource_version: str, stop: threading.Event
    ) -> Iterator[tuple[str, Manifest]]:
        """(type, object) events after resource_version until the server ends the watch."""
        lister = self._lister(kind)

        def untyped(**kwargs: Any) -> Any:  # no docstring: Watch then skips deserializing
            return lister(**kwargs)

        w = watch.Watch()
        for event in w.stream(
            untyped,
            resource_version=resource_version,
            timeout_seconds=120,
            allow_watch_bookmarks=False,
        ):
            if stop.is_set():
                w.stop()
                return
            yield str(event["type"]), dict(event["raw_object"])

    def data_of(self, kind: str, namespace: str, name: str) -> Manifest | None:
        read = (
            self.core.read_namespaced_config_map
            if kind == "ConfigMap"
            else self.core.read_namespaced_secret
        )
        try:
            return _json(
                read(name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def claim_path(self, namespace: str, claim: str) -> str | None:
        """The host directory of a bound PersistentVolumeClaim's hostPath volume (None
        while it is not bound yet)."""
        try:
            pvc = _json(
                self.core.read_namespaced_persistent_volume_claim(
                    claim, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        volume = (pvc.get("spec") or {}).get("volumeName")
        if not volume or (pvc.get("status") or {}).get("phase") != "Bound":
            return None
        pv = _json(
            self.core.read_persistent_volume(
                volume, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        )
        path = ((pv.get("spec") or {}).get("hostPath") or {}).get("path")
        return str(path) if path else None

    # --- pods ---
    def patch_pod_status(self, namespace: str, name: str, status: Manifest) -> None:
        try:
            self.core.patch_namespaced_pod_status(
                name, namespace, {"status": status}, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        """The final delete a kubelet sends once the pod's processes are gone."""
        try:
            self.core.delete_namespaced_pod(
                name,
                namespace,
                body=_any({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}),
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    def event(self, pod: Manifest, type_: str, reason: str, message: str, stamp: str) -> None:
        meta = pod["metadata"]
        node = pod["spec"].get("nodeName", "")
        body = {
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}"},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": AGENT_NAME, "host": node},
            "reportingComponent": AGENT_NAME,
            "reportingInstance": node,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.core.create_namespaced_event(
            meta["namespace"], _any(body), _request_timeout=REQUEST_TIMEOUT
        )

    # --- nodes and leases ---
    def apply_node(self, manifest: Manifest) -> Manifest:
        name = manifest["metadata"]["name"]
        try:
            return _json(
                self.core.create_node(
                    _any(manifest), _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
        except ApiException as err:
            if err.status != 409:
                raise
        patch = {"metadata": {"labels": manifest["metadata"]["labels"]}, "spec": manifest["spec"]}
        return _json(
            self.core.patch_node(
                name, patch, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        )

    def patch_node_status(self, name: str, status: Manifest) -> bool:
        """False if the Node is gone."""
        try:
            self.core.patch_node_status(name, status, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def delete_node(self, name: str) -> None:
        try:
            self.core.delete_node(name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as err:
            if err.status != 404:
                raise

    def renew_lease(self, lease: Manifest) -> None:
        ns = lease["metadata"]["namespace"]
        name = lease["metadata"]["name"]
        try:
            self.coordination.patch_namespaced_lease(
                name, ns, {"spec": lease["spec"]}, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as err:
            if err.status != 404:
                raise
            self.coordination.create_namespaced_lease(
                ns, _any(lease), _request_timeout=REQUEST_TIMEOUT
            )

    def pods_on(self, node: str) -> list[Manifest]:
        data = _json(
            self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
        )
        return list(data.get("items") or [])
