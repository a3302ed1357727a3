"""The strict grammar every value must pass before it reaches a Slurm file.

Slurm's config parser is line based: a newline starts a new directive, `#`
starts a comment, and `Key=Value` pairs are split on whitespace. A label value,
annotation or CR field that smuggled any of these through would let a user
write arbitrary directives into slurm.conf (an `Include`, a `SlurmctldHost`, a
`Prolog`). So values are never interpolated as plain strings: a validator
turns them into a `SlurmToken`, and the renderer refuses anything else
(see `slurmkube.render.templating`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

__all__ = [
    "InvalidValue",
    "SlurmToken",
    "address",
    "cluster_name",
    "config_line",
    "database_name",
    "database_password",
    "database_user",
    "feature",
    "file_path",
    "gres_type",
    "hostname",
    "joined",
    "param_list",
    "partition_name",
    "slurm_time",
    "topology_name",
]


@dataclass(frozen=True)
class InvalidValue(ValueError):
    """A value that cannot go into a Slurm file; says where it came from and what is accepted."""

    where: str
    value: str
    accepted: str

    def __str__(self) -> str:
        where = f"{self.where}: " if self.where else ""
        return f"{where}{self.value!r} is not valid; expected {self.accepted}"


class SlurmToken(str):
    """A string that passed one of this module's validators.

    Only the validators below create instances (by convention: `SlurmToken(...)`
    elsewhere is a review finding). The renderer accepts nothing else.
    """

    __slots__ = ()


@lru_cache(maxsize=1 << 16)
def _matches(pattern: re.Pattern[str], value: str) -> bool:
    # Fleets repeat values (a clique per 18-72 nodes, one product per pool):
    # each distinct value is matched once per process.
    return pattern.fullmatch(value) is not None


# The same rules as patterns for CRD schemas, which the API server checks with
# Go's RE2 (no lookaround): what RE2 cannot say is a CEL rule in the CRD.
SCHEMA_PATTERNS: Final = {
    "partition": r"^[A-Za-z][A-Za-z0-9_-]{0,62}$",
    "cluster": r"^[a-z][a-z0-9_-]{0,39}$",
    "feature": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
    "time": r"^(UNLIMITED|INFINITE|[0-9]{1,6}|[0-9]{1,6}:[0-9]{2}(:[0-9]{2})?"
    r"|[0-9]{1,4}-[0-9]{1,2}(:[0-9]{2}(:[0-9]{2})?)?)$",
    # Printable ASCII without space and `#` (0x23).
    # RE2 repeat counts stop at 1000, so the length is the schema's maxLength.
    "config_line": r"^[A-Za-z]{2,40}=[!-\"$-~]+$",
    "hostname": r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$",
}


def _check(pattern: re.Pattern[str], value: object, where: str, accepted: str) -> SlurmToken:
    if not isinstance(value, str) or not _matches(pattern, value):
        raise InvalidValue(where=where, value=str(value), accepted=accepted)
    return SlurmToken(value)


# Kubernetes node names are RFC 1123 subdomains; Slurm additionally splits
# hostlists on `,` and `[]`, and its node-name buffers are 64 bytes
# (slurm.conf(5) NodeName: "should be the same as the hostname").
_DNS_LABEL: Final = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_HOSTNAME: Final = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_HOSTNAME_MAX: Final = 63


def hostname(value: object, where: str) -> SlurmToken:
    """A Slurm NodeName taken from a Kubernetes node name."""
    if isinstance(value, str) and len(value) > _HOSTNAME_MAX:
        value = value + "\n"  # fails the pattern below, with the usual message
    return _check(
        _HOSTNAME,
        value,
        where,
        "a lowercase RFC 1123 hostname of at most 63 characters (a-z, 0-9, '-', '.')",
    )


# slurm.conf(5) PartitionName; `DEFAULT` is a keyword there, not a name.
_PARTITION: Final = re.compile(r"(?!(?i:default)$)[A-Za-z][A-Za-z0-9_-]{0,62}")


def partition_name(value: object, where: str) -> SlurmToken:
    return _check(
        _PARTITION, value, where, "a letter then up to 62 of [A-Za-z0-9_-], not 'DEFAULT'"
    )


_CLUSTER: Final = re.compile(r"[a-z][a-z0-9_-]{0,39}")


def cluster_name(value: object, where: str) -> SlurmToken:
    """slurm.conf(5) ClusterName: lowercase; slurmdbd uses it as a table prefix."""
    return _check(_CLUSTER, value, where, "a lowercase letter then up to 39 of [a-z0-9_-]")


# Features are matched by --constraint expressions, whose operators are
# `& | , * [ ] ( ) !`; a feature may contain none of them.
_FEATURE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def feature(value: object, where: str) -> SlurmToken:
    return _check(_FEATURE, value, where, "1-63 of [A-Za-z0-9_.-], starting alphanumeric")


# GRES types appear inside `gpu:<type>:<count>`, so `:` and `,` are out.
_GRES_TYPE: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def gres_type(value: object, where: str) -> SlurmToken:
    return _check(_GRES_TYPE, value, where, "1-63 of [a-z0-9_.-], starting alphanumeric")


# BlockName / SwitchName: arbitrary, unique, and parsed as hostlist entries
# inside `Switches=`, so no brackets or commas (topology.conf(5)).
_TOPOLOGY_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def topology_name(value: object, where: str) -> SlurmToken:
    return _check(_TOPOLOGY_NAME, value, where, "1-63 of [A-Za-z0-9_.-], starting alphanumeric")


# slurm.conf(5) time format for MaxTime/DefaultTime.
_TIME: Final = re.compile(
    r"UNLIMITED|INFINITE|\d{1,6}|\d{1,6}:\d{2}(?::\d{2})?|\d{1,4}-\d{1,2}(?::\d{2}(?::\d{2})?)?"
)


def slurm_time(value: object, where: str) -> SlurmToken:
    return _check(
        _TIME,
        value,
        where,
        "a Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED",
    )


_PATH: Final = re.compile(r"/[A-Za-z0-9_.%/+-]*")


def file_path(value: object, where: str) -> SlurmToken:
    """An absolute path with no whitespace, `#`, `=` or shell metacharacters."""
    return _check(_PATH, value, where, "an absolute path of [A-Za-z0-9_.%/+-]")


# Comma-separated parameter lists such as SchedulerParameters.
_PARAMS: Final = re.compile(
    r"[A-Za-z0-9_]+(?:=[A-Za-z0-9_.:/-]+)?(?:,[A-Za-z0-9_]+(?:=[A-Za-z0-9_.:/-]+)?)*"
)


def param_list(value: object, where: str) -> SlurmToken:
    return _check(_PARAMS, value, where, "comma-separated key or key=value items")


# One extra slurm.conf directive. Keys are letters only (all slurm.conf keys are);
# the value is one token of printable characters without `#` or a space.
_CONFIG_LINE: Final = re.compile(r"([A-Za-z]{2,40})=([!-~]{1,1024})")

# Directives slurmkube owns: a user line for these would silently fight the
# operator (or, for Include, read a file nobody reviewed).
MANAGED_KEYS: Final = frozenset(
    k.lower()
    for k in (
        "Include",
        "ClusterName",
        "SlurmctldHost",
        "ControlMachine",
        "BackupController",
        "SlurmctldPort",
        "SlurmdPort",
        "AuthType",
        "AuthAltTypes",
        "AuthAltParameters",
        "AuthInfo",
        "CredType",
        "NodeName",
        "PartitionName",
        "NodeSet",
        "DownNodes",
        "TopologyPlugin",
        "SelectType",
        "GresTypes",
        "StateSaveLocation",
        "SlurmdSpoolDir",
        "SlurmUser",
        "SlurmctldPidFile",
        "SlurmdPidFile",
        "SlurmctldLogFile",
        "SlurmdLogFile",
        "ResumeProgram",
        "SuspendProgram",
        "ResumeFailProgram",
        "SuspendTime",
        "SuspendTimeout",
        "ResumeTimeout",
        "SuspendExcNodes",
        "SlurmdTimeout",
        "Prolog",
        "Epilog",
        "PrologSlurmctld",
        "EpilogSlurmctld",
        "SchedulerParameters",
        "PluginDir",
        "AccountingStorageType",
        "AccountingStorageHost",
        "AccountingStoragePort",
    )
)


def config_line(value: object, where: str) -> SlurmToken:
    """An extra `Key=Value` line for slurm.conf, for keys slurmkube does not manage."""
    token = _check(
        _CONFIG_LINE,
        value,
        where,
        "one 'Key=Value' directive: Key of letters, Value of printable characters "
        "without spaces or '#'",
    )
    if "#" in token:
        raise InvalidValue(where=where, value=token, accepted="a value without '#'")
    key = token.split("=", 1)[0]
    if key.lower() in MANAGED_KEYS:
        raise InvalidValue(
            where=where,
            value=token,
            accepted=f"a key slurmkube does not manage ({key} is set from the spec)",
        )
    return token


def joined(tokens: Iterable[SlurmToken], sep: str = ",") -> SlurmToken:
    """Validated tokens joined by a separator Slurm splits on (`,` or `:`) stay valid."""
    if sep not in (",", ":"):
        raise ValueError(f"separator {sep!r} is not a Slurm list separator")
    items = list(tokens)
    for item in items:
        if not isinstance(item, SlurmToken):
            raise TypeError(f"refusing to join unvalidated {item!r}")
    return SlurmToken(sep.join(items))


_IPV4: Final = re.compile(r"(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)")


_FQDN: Final = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_FQDN_MAX: Final = 253


def address(value: object, where: str) -> SlurmToken:
    """A NodeAddr/SlurmctldHost address: an IPv4 address or a DNS name (a pod's FQDN)."""
    if isinstance(value, str) and _IPV4.fullmatch(value):
        return SlurmToken(value)
    if isinstance(value, str) and len(value) > _FQDN_MAX:
        value = value + "\n"
    return _check(_FQDN, value, where, "an IPv4 address or a lowercase DNS name")


# slurmdbd.conf(5) Storage*: the external MariaDB. Slurm's parser takes a value
# up to the next space, `#` starts a comment, and a quoted value ends at the
# next `"`; so a password is printable ASCII without space, quotes, `#` or `\`.
_DB_NAME: Final = re.compile(r"[A-Za-z0-9_]{1,64}")
_DB_USER: Final = re.compile(r"[A-Za-z0-9_.-]{1,80}")
_DB_PASSWORD: Final = re.compile(r"[!$-&(-\[\]-~]{1,256}")


def database_name(value: object, where: str) -> SlurmToken:
    return _check(_DB_NAME, value, where, "1-64 of [A-Za-z0-9_]")


def database_user(value: object, where: str) -> SlurmToken:
    return _check(_DB_USER, value, where, "1-80 of [A-Za-z0-9_.-]")


def database_password(value: object, where: str) -> SlurmToken:
    """Never echoed back: the error says what is wrong, not what the value was."""
    if isinstance(value, str) and _matches(_DB_PASSWORD, value):
        return SlurmToken(value)
    raise InvalidValue(
        where=where,
        value="<redacted>",
        accepted="1-256 printable ASCII characters without spaces, quotes, '#' or '\\'",
    )
