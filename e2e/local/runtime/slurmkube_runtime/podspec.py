"""Pure translation of a pod spec into what the sandbox needs.

Everything a kubelet derives from the spec before it starts a process: whether
the image is one we can run, the container's environment (`env`, `envFrom`,
`valueFrom`, `$(VAR)` expansion), the files of each volume, the hostname and
the hosts file that stands in for cluster DNS. No I/O here: ConfigMaps and
Secrets come in through a `Lookup`, so the rules are unit-testable with dicts.
The semantics follow the Kubernetes API reference for PodSpec, EnvVar and
Volume; where this runtime does less, the function says so.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from slurmkube.topology.fleet import parse_quantity
from slurmkube_runtime.layout import CLUSTER_DOMAIN, HOST_BUILD_SERIES, IMAGE_REPOSITORY

Manifest = dict[str, Any]
# (kind, namespace, name) -> the object's data as bytes per key, or None if it is missing.
Lookup = Callable[[str, str, str], Mapping[str, bytes] | None]
GPU_RESOURCE = "nvidia.com/gpu"


class SpecError(ValueError):
    """The pod asks for something this runtime cannot give; the message says what."""


class MissingObject(SpecError):
    """A ConfigMap or Secret the pod needs does not exist (yet): retry later."""


def image_repository(image: str) -> str:
    """`[registry/]repo[:tag][@digest]` -> repo, with a registry host part dropped."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name.rsplit(":", 1)[0]
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    return "/".join(parts)


def image_supported(image: str) -> bool:
    """Only the project's Slurm image can run here (imagespec says from which files)."""
    return image_repository(image) == IMAGE_REPOSITORY


def unsupported_image_message(image: str) -> str:
    return (
        f'image "{image}" is not known to the local runtime: it runs only '
        f"{IMAGE_REPOSITORY}:<tag>, backed by the host's Slurm build ({HOST_BUILD_SERIES} tags) "
        "or by the image `make images` built; schedule other pods onto simulated (kwok) nodes"
    )


# --- quantities and the downward API ---------------------------------------------------


def quantity(text: str | int | float) -> Decimal:
    """A Kubernetes resource.Quantity ("500m", "4Gi") as a number (the operator's parser)."""
    return parse_quantity(str(text), "resource quantity")


def _container_resource(container: Manifest, key: str) -> str | None:
    kind, _, resource = key.partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(resource)
    if value is None and kind == "requests":
        value = ((container.get("resources") or {}).get("limits") or {}).get(resource)
    return None if value is None else str(value)


def resource_field(pod: Manifest, container: Manifest | None, ref: Manifest) -> str:
    """A resourceFieldRef: the value in units of `divisor`, rounded up as kubelet does."""
    name = ref.get("containerName")
    if name:
        container = next((c for c in pod["spec"]["containers"] if c["name"] == name), None)
    if container is None:
        raise SpecError(f"resourceFieldRef {ref.get('resource')}: no container {name!r}")
    value = _container_resource(container, ref["resource"])
    if value is None:
        # Unset limits default to the node's allocatable; the local nodes advertise
        # LOCAL_NODE_RESOURCES (nodes.py), but a plain 0 is an honest "unlimited" here.
        return "0"
    divisor = quantity(ref.get("divisor") or "1")
    return str(math.ceil(quantity(value) / divisor))


def _format_map(values: Mapping[str, str]) -> str:
    return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))


def field_ref(pod: Manifest, path: str) -> str:
    """A fieldRef path (the ones EnvVarSource and DownwardAPIVolumeFile accept)."""
    meta = pod["metadata"]
    status = pod.get("status") or {}
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    simple: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: str(meta["name"]),
        "metadata.namespace": lambda: str(meta["namespace"]),
        "metadata.uid": lambda: str(meta["uid"]),
        "metadata.labels": lambda: _format_map(meta.get("labels") or {}),
        "metadata.annotations": lambda: _format_map(meta.get("annotations") or {}),
        "spec.nodeName": lambda: str(pod["spec"].get("nodeName", "")),
        "spec.serviceAccountName": lambda: str(pod["spec"].get("serviceAccountName", "")),
        "status.hostIP": lambda: str(status.get("hostIP", "")),
        "status.hostIPs": lambda: ",".join(a["ip"] for a in status.get("hostIPs") or []),
        "status.podIP": lambda: str(status.get("podIP", "")),
        "status.podIPs": lambda: ",".join(a["ip"] for a in status.get("podIPs") or []),
    }
    if path not in simple:
        raise SpecError(f"fieldRef.fieldPath {path!r} is not supported")
    return simple[path]()


# --- environment -----------------------------------------------------------------------

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: known names replaced, `$$` -> `$`, others kept."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(repl, text)


def _key_ref(kind: str, ns: str, ref: Manifest, lookup: Lookup) -> str | None:
    data = lookup(kind, ns, ref["name"])
    optional = bool(ref.get("optional"))
    if data is None or ref["key"] not in data:
        if optional:
            return None
        what = f"{kind} {ns}/{ref['name']}" + (f" key {ref['key']!r}" if data is not None else "")
        raise MissingObject(f"{what} not found")
    return data[ref["key"]].decode(errors="replace")


def container_env(
    pod: Manifest, container: Manifest, lookup: Lookup, image_env: Mapping[str, str]
) -> dict[str, str]:
    """The process environment: image defaults, then envFrom, then env, in order."""
    ns = pod["metadata"]["namespace"]
    env = dict(image_env)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = lookup(kind, ns, ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                raise MissingObject(f"{kind} {ns}/{ref['name']} not found")
            env.update({prefix + k: v.decode(errors="replace") for k, v in data.items()})
    for var in container.get("env") or []:
        value = _env_value(pod, container, var, lookup, env)
        if value is not None:
            env[var["name"]] = value
    return env


def _env_value(
    pod: Manifest, container: Manifest, var: Manifest, lookup: Lookup, env: Mapping[str, str]
) -> str | None:
    if "valueFrom" not in var:
        return expand(str(var.get("value", "")), env)
    source = var["valueFrom"]
    ns = pod["metadata"]["namespace"]
    if "fieldRef" in source:
        return field_ref(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        return resource_field(pod, container, source["resourceFieldRef"])
    if "configMapKeyRef" in source:
        return _key_ref("ConfigMap", ns, source["configMapKeyRef"], lookup)
    if "secretKeyRef" in source:
        return _key_ref("Secret", ns, source["secretKeyRef"], lookup)
    raise SpecError(f"env {var['name']}: valueFrom {sorted(source)} is not supported")


def command_line(
    container: Manifest,
    env: Mapping[str, str],
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
) -> list[str]:
    """The argv a kubelet runs: `command` replaces the image's entrypoint and drops
    its cmd, `args` replace the cmd. `$(VAR)` is expanded in the pod's parts only.
    The host build has neither entrypoint nor cmd."""
    command = [expand(str(a), env) for a in (container.get("command") or [])]
    args = [expand(str(a), env) for a in (container.get("args") or [])]
    argv = command + args if command else [*entrypoint, *(args or cmd)]
    if not argv:
        raise SpecError(
            f"container {container['name']}: {IMAGE_REPOSITORY} has no entrypoint here; set command"
        )
    return argv


# --- volumes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class VolumeFile:
    path: str
    data: bytes
    mode: int


def _items(
    data: Mapping[str, bytes], items: Iterable[Manifest] | None, mode: int
) -> list[VolumeFile]:
    if not items:
        return [VolumeFile(k, v, mode) for k, v in sorted(data.items())]
    out = []
    for item in items:
        if item["key"] in data:
            out.append(VolumeFile(item["path"], data[item["key"]], item.get("mode", mode)))
    return out


def _object_files(
    kind: str, ns: str, name: str, source: Manifest, lookup: Lookup, *, mode: int
) -> list[VolumeFile]:
    data = lookup(kind, ns, name)
    if data is None:
        if source.get("optional"):
            return []
        raise MissingObject(f"{kind} {ns}/{name} not found")
    items = source.get("items")
    if items and not source.get("optional"):
        missing = [i["key"] for i in items if i["key"] not in data]
        if missing:
            raise MissingObject(f"{kind} {ns}/{name} has no key(s) {missing}")
    return _items(data, items, mode)


def _downward_files(pod: Manifest, items: Iterable[Manifest], mode: int) -> list[VolumeFile]:
    out = []
    for item in items:
        if "fieldRef" in item:
            value = field_ref(pod, item["fieldRef"]["fieldPath"])
        else:
            value = resource_field(pod, None, item["resourceFieldRef"])
        out.append(VolumeFile(item["path"], value.encode(), item.get("mode", mode)))
    return out


def volume_files(pod: Manifest, volume: Manifest, lookup: Lookup) -> list[VolumeFile] | None:
    """The files of a ConfigMap/Secret/downwardAPI/projected volume; None for a
    directory (emptyDir, persistentVolumeClaim).

    Raises SpecError for a volume type this runtime does not materialise.
    """
    ns = pod["metadata"]["namespace"]
    if "emptyDir" in volume or "persistentVolumeClaim" in volume:
        return None  # a directory: the pod's own (emptyDir) or the claim's (agent)
    if "configMap" in volume:
        src = volume["configMap"]
        return _object_files(
            "ConfigMap", ns, src["name"], src, lookup, mode=src.get("defaultMode", 0o644)
        )
    if "secret" in volume:
        src = volume["secret"]
        mode = src.get("defaultMode", 0o644)
        return _object_files("Secret", ns, src["secretName"], src, lookup, mode=mode)
    if "downwardAPI" in volume:
        src = volume["downwardAPI"]
        return _downward_files(pod, src.get("items") or [], src.get("defaultMode", 0o644))
    if "projected" in volume:
        return _projected_files(pod, volume["projected"], lookup)
    kinds = sorted(k for k in volume if k != "name")
    raise SpecError(
        f"volume {volume['name']}: {kinds} is not supported by the local runtime "
        "(configMap, secret, emptyDir, persistentVolumeClaim, downwardAPI and projected are)"
    )


def _projected_files(pod: Manifest, spec: Manifest, lookup: Lookup) -> list[VolumeFile]:
    ns = pod["metadata"]["namespace"]
    mode = spec.get("defaultMode", 0o644)
    files: list[VolumeFile] = []
    for source in spec.get("sources") or []:
        if "configMap" in source:
            cm = source["configMap"]
            files += _object_files("ConfigMap", ns, cm["name"], cm, lookup, mode=mode)
        elif "secret" in source:
            sec = source["secret"]
            files += _object_files("Secret", ns, sec["name"], sec, lookup, mode=mode)
        elif "downwardAPI" in source:
            files += _downward_files(pod, source["downwardAPI"].get("items") or [], mode)
        elif "serviceAccountToken" in source:
            # No token issuance here: the pods we run do not call the API server.
            token = source["serviceAccountToken"]
            files.append(VolumeFile(token.get("path", "token"), b"", mode))
        # clusterTrustBundle and others: nothing to project on this runtime.
    return files


def decode_secret(obj: Manifest) -> dict[str, bytes]:
    data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    data.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
    return data


def decode_config_map(obj: Manifest) -> dict[str, bytes]:
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


# --- identity and names ----------------------------------------------------------------


def hostname(pod: Manifest) -> str:
    """spec.hostname or the pod name, cut to 63 characters like kubelet does."""
    name = pod["spec"].get("hostname") or pod["metadata"]["name"]
    return str(name)[:63].rstrip("-.")


def fqdn(pod: Manifest) -> str | None:
    subdomain = pod["spec"].get("subdomain")
    if not subdomain:
        return None
    ns = pod["metadata"]["namespace"]
    return f"{hostname(pod)}.{subdomain}.{ns}.svc.{CLUSTER_DOMAIN}"


def gpu_count(pod: Manifest) -> int:
    """GPUs the pod was scheduled with: limits (or requests) of nvidia.com/gpu, summed."""
    total = 0
    for container in pod["spec"]["containers"]:
        value = _container_resource(container, f"limits.{GPU_RESOURCE}")
        value = value or _container_resource(container, f"requests.{GPU_RESOURCE}")
        total += int(quantity(value)) if value else 0
    return total


def _names(name: str, ns: str, viewer_ns: str) -> list[str]:
    """Every spelling a resolver with the pod's search path would try for `name.ns`."""
    names = [f"{name}.{ns}.svc.{CLUSTER_DOMAIN}", f"{name}.{ns}.svc", f"{name}.{ns}"]
    if ns == viewer_ns:
        names.append(name)
    return names


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def hosts_file(viewer: Manifest, pods: Iterable[Manifest], services: Iterable[Manifest]) -> str:
    """/etc/hosts for one pod: itself, pod hostnames and Services, all as pod IPs.

    There is no cluster DNS: /etc/hosts does not use the resolver's search path,
    so every spelling is listed (`svc`, `svc.ns`, ..., short names for the
    pod's own namespace). Only pods this runtime addressed appear, so a name
    never resolves to an address the agent did not assign. A ClusterIP Service
    resolves to its first ready backend (no kube-proxy here, so ports are not
    translated: port must equal targetPort); a headless one to all of them.
    """
    viewer_ns = viewer["metadata"]["namespace"]
    own_ip = (viewer.get("status") or {}).get("podIP", "")
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    own_fqdn = fqdn(viewer)
    if own_ip:
        lines.append(f"{own_ip}\t{own_fqdn + ' ' if own_fqdn else ''}{hostname(viewer)}")
    with_ip = sorted(
        (p for p in pods if (p.get("status") or {}).get("podIP")),
        key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]),
    )
    for pod in with_ip:
        sub = pod["spec"].get("subdomain")
        if not sub or pod["metadata"]["uid"] == viewer["metadata"]["uid"]:
            continue
        names = _names(f"{hostname(pod)}.{sub}", pod["metadata"]["namespace"], viewer_ns)
        lines.append(f"{pod['status']['podIP']}\t{' '.join(names)}")
    for svc in sorted(services, key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])):
        backends = service_backends(svc, with_ip)
        headless = svc["spec"].get("clusterIP") == "None"
        spelled = " ".join(_names(svc["metadata"]["name"], svc["metadata"]["namespace"], viewer_ns))
        for pod in backends if headless else backends[:1]:
            lines.append(f"{pod['status']['podIP']}\t{spelled}")
    return "\n".join(lines) + "\n"


def pod_ready(pod: Manifest) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def service_backends(svc: Manifest, pods: Iterable[Manifest]) -> list[Manifest]:
    """Pods a Service selects in its namespace; not-ready ones only if it publishes them."""
    spec = svc.get("spec") or {}
    ns = svc["metadata"]["namespace"]
    everyone = bool(spec.get("publishNotReadyAddresses"))
    return [
        p
        for p in pods
        if p["metadata"]["namespace"] == ns
        and not p["metadata"].get("deletionTimestamp")
        and _selects(spec.get("selector") or {}, p["metadata"].get("labels") or {})
        and (everyone or pod_ready(p))
    ]
