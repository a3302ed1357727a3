"""sacctmgr for a process outside the Slurm pods: slurmdbd's accounts, associations, QOS.

Why sacctmgr and not slurmrestd's `/slurmdb/` endpoints: the policy's changes
are already planned as `sacctmgr -i` argument lists (`plan.policy.slurm_diff`)
and tested against a real slurmdbd as such; slurmrestd may run with zero
replicas; and sacctmgr reaches slurmdbd directly, the same way as scontrol
reaches slurmctld (`slurm.jwt_cli`): a client that finds SLURM_JWT uses
auth/jwt, and slurmkube's slurmdbd.conf has `AuthAltTypes=auth/jwt` with the
cluster's jwt.key. A token for SlurmUser makes it slurmdbd's super user.

This adapter decides nothing: it runs the argument lists it is given (each
must start with `sacctmgr` and is run without a shell) and returns `show`
rows as dictionaries keyed by the requested format fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurmkube.api import grammar
from slurmkube.slurm.cli import run_slurm_command
from slurmkube.slurm.errors import SlurmError

__all__ = ["SacctmgrClient", "accounting_client_config"]

# What the policy reads back, in sacctmgr's format field names (sacctmgr(1)).
QOS_FIELDS = ("Name", "Priority", "Preempt", "GrpTRESMins", "Flags", "Description")
ACCOUNT_FIELDS = ("Account", "Descr", "Org")
ASSOCIATION_FIELDS = ("Account", "User", "Fairshare", "GrpTRES", "QOS", "DefaultQOS")
USER_FIELDS = ("User", "DefaultAccount")


def accounting_client_config(cluster_name: str, dbd_host: str, dbd_port: int) -> str:
    """The slurm.conf sacctmgr needs to reach slurmdbd (slurm.conf(5))."""
    name = grammar.cluster_name(cluster_name, "cluster name")
    host = grammar.address(dbd_host, "slurmdbd address")
    if not 0 < dbd_port < 65536:
        raise grammar.InvalidValue("slurmdbd port", str(dbd_port), "1-65535")
    return (
        "# Written by slurmkube for its own sacctmgr calls; authentication is SLURM_JWT.\n"
        f"ClusterName={name}\n"
        "SlurmctldHost=localhost\n"
        "AccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost={host}\n"
        f"AccountingStoragePort={dbd_port}\n"
        "AuthType=auth/slurm\n"
        "AuthAltTypes=auth/jwt\n"
    )


class SacctmgrClient:
    """`sacctmgr` with validated argument lists; each call carries a fresh JWT."""

    def __init__(
        self,
        *,
        config_path: Path,
        jwt: Callable[[], str],
        bin_dir: Path | None = None,
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._sacctmgr = str(bin_dir / "sacctmgr") if bin_dir else "sacctmgr"
        self._env = {"PATH": "/usr/bin:/bin", **(env or {}), "SLURM_CONF": str(config_path)}
        self._jwt = jwt
        self._timeout = timeout

    def run(self, argv: Sequence[str]) -> str:
        """One `sacctmgr ...` argument list (argv[0] must be `sacctmgr`); its stdout."""
        if not argv or argv[0] != "sacctmgr":
            raise ValueError(f"not a sacctmgr command: {list(argv)[:2]}")
        # sacctmgr -i exits 0 on "Nothing new added" and 1 on errors; stderr says why.
        return run_slurm_command(
            [self._sacctmgr, *argv[1:]],
            {**self._env, "SLURM_JWT": self._jwt()},
            self._timeout,
            f"sacctmgr {' '.join(argv[1:4])}",
        )

    def show(self, entity: str, fields: Sequence[str]) -> list[dict[str, str]]:
        """`sacctmgr -P -n show <entity> format=...` as one dict per row."""
        out = self.run(["sacctmgr", "-P", "-n", "show", entity, f"format={','.join(fields)}"])
        rows = []
        for line in out.splitlines():
            if not line:
                continue
            values = line.split("|")
            if len(values) != len(fields):
                raise SlurmError(
                    f"sacctmgr show {entity}: {len(values)} columns, expected {len(fields)}",
                    operation=f"show {entity}",
                )
            rows.append(dict(zip(fields, values, strict=True)))
        return rows

    def show_qos(self) -> list[dict[str, str]]:
        return self.show("qos", QOS_FIELDS)

    def show_accounts(self) -> list[dict[str, str]]:
        return self.show("account", ACCOUNT_FIELDS)

    def show_associations(self) -> list[dict[str, str]]:
        return self.show("assoc", ASSOCIATION_FIELDS)

    def show_default_accounts(self) -> dict[str, str]:
        """User -> default account (Slurm will not delete that association first)."""
        return {r["User"]: r["DefaultAccount"] for r in self.show("user", USER_FIELDS)}
