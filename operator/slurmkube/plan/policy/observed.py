"""What slurmdbd shows (`sacctmgr -P show` rows) -> `SlurmEntity`s the diff compares.

The rows are the adapter's (`slurm.accounting`), keyed by sacctmgr's format
field names. Lists Slurm prints in its own order (a QOS's Preempt, an
association's QOS) are sorted, as `compile_slurm` writes them; `root` and its
associations are Slurm's own and never compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from slurmkube.plan.policy.slurm import Kind, SlurmEntity

Row = Mapping[str, str]


def _sorted_list(value: str) -> str:
    return ",".join(sorted(filter(None, value.split(","))))


def _entity(kind: Kind, name: str, account: str, attrs: Mapping[str, str]) -> SlurmEntity:
    return SlurmEntity(kind, name, account, tuple(sorted(attrs.items())))


def observed_entities(
    qos: Iterable[Row], accounts: Iterable[Row], associations: Iterable[Row]
) -> tuple[SlurmEntity, ...]:
    """The three `show` answers -> QOS, account and user entities (root left out)."""
    entities = [
        _entity(
            "qos",
            row["Name"],
            "",
            {
                "Description": row["Description"],
                "Flags": row["Flags"],
                "GrpTRESMins": row["GrpTRESMins"],
                "Preempt": _sorted_list(row["Preempt"]),
                "Priority": row["Priority"],
            },
        )
        for row in qos
    ]
    described = {row["Account"]: (row["Descr"], row["Org"]) for row in accounts}
    for row in associations:
        account, user = row["Account"], row["User"]
        if user:
            entities.append(_entity("user", user, account, {}))
            continue
        descr, org = described.get(account, ("", ""))
        entities.append(
            _entity(
                "account",
                account,
                "",
                {
                    "DefaultQOS": row["DefaultQOS"],
                    "Description": descr,
                    "Fairshare": row["Fairshare"],
                    "GrpTRES": row["GrpTRES"],
                    "Organization": org,
                    "QOS": _sorted_list(row["QOS"]),
                },
            )
        )
    # Slurm's own root account and what sits in it; a team may still list the
    # user root (commands run as root in its pods), whose association is the team's.
    return tuple(
        e
        for e in entities
        if e.account != "root" and not (e.kind == "account" and e.name == "root")
    )
