"""Wait for cluster state with a deadline, and say what the state was when it ran out.

e2e tests assert on state, never on calls (controllers are level-based and the
cache may be stale), so every check is "poll until true or time out". When a
wait times out the failure shows the object as the API server last returned it
plus the Events about it: the usual reason (Unschedulable, FailedCreate, a
webhook denial) is right there instead of in a rerun.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from slurmkube_e2e.kube import Kube, Manifest

POLL_SECONDS = 0.25
T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A waited-for state was not reached; the message shows the last observed state."""


def condition(obj: Manifest | None, type_: str) -> dict[str, Any] | None:
    """The status condition of type_ on obj, if any."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def has_condition(obj: Manifest | None, type_: str, status: str = "True") -> bool:
    cond = condition(obj, type_)
    return cond is not None and cond.get("status") == status


def describe(kube: Kube, obj: Manifest | None, what: str) -> str:
    """YAML of obj (managedFields dropped) and the Events whose involvedObject is obj."""
    if obj is None:
        return f"{what}: not found"
    meta = obj.get("metadata") or {}
    shown = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    text = f"{what}:\n{yaml.safe_dump(shown, sort_keys=False)}"
    namespace = meta.get("namespace")
    if namespace:
        events = kube.list(
            "v1", "Event", namespace=namespace, field_selector=f"involvedObject.uid={meta['uid']}"
        )
        lines = [
            f"  {e.get('type')} {e.get('reason')}: {e.get('message')}"
            for e in sorted(events, key=lambda e: str(e.get("lastTimestamp") or ""))
        ]
        text += "events:\n" + ("\n".join(lines) if lines else "  (none)")
    return text


def _label(kind: str, name: str, namespace: str | None) -> str:
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def _poll_object(
    kube: Kube,
    api_version: str,
    kind: str,
    name: str,
    done: Callable[[Manifest | None], bool],
    *,
    namespace: str | None,
    timeout: float,
    what: str,
) -> Manifest | None:
    """Poll one object (None while absent) until done(obj); on timeout show it."""
    deadline = time.monotonic() + timeout
    while True:
        obj = kube.get(api_version, kind, name, namespace)
        if done(obj):
            return obj
        if time.monotonic() > deadline:
            label = _label(kind, name, namespace)
            raise WaitTimeout(
                f"timed out after {timeout:.0f}s waiting for {label} to be {what}\n"
                + describe(kube, obj, label)
            )
        time.sleep(POLL_SECONDS)


def wait_for(
    kube: Kube,
    api_version: str,
    kind: str,
    name: str,
    predicate: Callable[[Manifest], bool],
    *,
    namespace: str | None = None,
    timeout: float = 60,
    what: str = "ready",
) -> Manifest:
    """Poll the object until it exists and predicate(obj) holds; returns that object."""
    obj = _poll_object(
        kube,
        api_version,
        kind,
        name,
        lambda o: o is not None and predicate(o),
        namespace=namespace,
        timeout=timeout,
        what=what,
    )
    assert obj is not None
    return obj


def wait_for_list(
    kube: Kube,
    api_version: str,
    kind: str,
    predicate: Callable[[list[Manifest]], bool],
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout: float = 60,
    what: str = "",
) -> list[Manifest]:
    """Poll a list of objects until predicate(items) holds; returns those items."""
    deadline = time.monotonic() + timeout
    while True:
        items = kube.list(
            api_version,
            kind,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        if predicate(items):
            return items
        if time.monotonic() > deadline:
            shown = "\n".join(describe(kube, i, f"{kind} {i['metadata']['name']}") for i in items)
            raise WaitTimeout(
                f"timed out after {timeout:.0f}s waiting for {kind} list "
                f"(namespace={namespace}, selector={label_selector or field_selector}) "
                f"to be {what or 'ready'}; "
                f"{len(items)} items:\n{shown}"
            )
        time.sleep(POLL_SECONDS)


def wait_gone(
    kube: Kube,
    api_version: str,
    kind: str,
    name: str,
    *,
    namespace: str | None = None,
    timeout: float = 60,
) -> None:
    """Poll until the object no longer exists (deleted and its finalizers done)."""
    _poll_object(
        kube,
        api_version,
        kind,
        name,
        lambda o: o is None,
        namespace=namespace,
        timeout=timeout,
        what="deleted",
    )


def stays(
    check: Callable[[], bool], *, seconds: float, what: str, describe_state: Callable[[], str]
) -> None:
    """Assert check() holds on every poll for `seconds` (e.g. a Job over quota stays suspended)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not check():
            raise AssertionError(f"expected {what} for {seconds:.0f}s\n" + describe_state())
        time.sleep(POLL_SECONDS)


def eventually(what: str, get: Callable[[], T], done: Callable[[T], bool], timeout: float) -> T:
    """Poll get() until done(value); on timeout fail with the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}: {value}")
        time.sleep(1)
