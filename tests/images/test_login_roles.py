"""The Slurm images' login-pod roles (images/slurm/entrypoint.sh): `sleep` refuses
root and SlurmUser, `sssd` refuses a bind password that would add a line to
sssd.conf, and neither image ships ssh host keys (docs/security.md, "Login pods")."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkube.api.login import LdapSpec
from slurmkube.build.sssd import sssd_conf

from .conftest import Podman

SERIES = ("slurm-26.05", "slurm-24.11")


@pytest.mark.parametrize("image", SERIES)
@pytest.mark.parametrize(("user", "allowed"), [("65534", True), ("0", False), ("401", False)])
def test_the_login_container_runs_only_as_an_unprivileged_uid(
    podman: Podman, images: dict[str, str], image: str, user: str, allowed: bool
) -> None:
    ok = podman.succeeds(
        "run", "--rm", "--pull=never", "--user", f"{user}:{user}", images[image], "sleep", "0"
    )
    assert ok is allowed


@pytest.mark.parametrize("image", SERIES)
def test_sssd_refuses_a_bind_password_of_two_lines(
    podman: Podman, images: dict[str, str], image: str, tmp_path: Path
) -> None:
    spec = LdapSpec.model_validate(
        {"uri": "ldaps://h", "baseDN": "dc=x", "bindDN": "cn=s,dc=x", "bindPasswordSecret": "b"}
    )
    (tmp_path / "sssd.conf").write_text(sssd_conf(spec))
    (tmp_path / "password").write_text("secret\nldap_tls_reqcert = never\n")
    out = podman(
        "run", "--rm", "--pull=never", "--user", "0:0", "-v", f"{tmp_path}:/cfg:ro",
        "-e", "SLURMKUBE_SSSD_CONF=/cfg/sssd.conf",
        "-e", "SLURMKUBE_LDAP_BIND_PASSWORD_FILE=/cfg/password",
        "--entrypoint", "bash", images[image], "-c",
        "/usr/local/bin/entrypoint.sh sssd; echo exit=$?; cat /etc/sssd/sssd.conf",
        timeout=60,
    )  # fmt: skip
    assert "exit=64" in out
    assert "ldap_tls_reqcert = never" not in out and "ldap_default_authtok =" not in out


@pytest.mark.parametrize("image", SERIES)
def test_the_image_ships_no_ssh_host_keys_and_resolves_through_sss(
    podman: Podman, images: dict[str, str], image: str
) -> None:
    out = podman(
        "run", "--rm", "--pull=never", "--entrypoint", "sh", images[image], "-c",
        "ls /etc/ssh; grep -E '^(passwd|group):' /etc/nsswitch.conf",
    )  # fmt: skip
    assert "ssh_host_" not in out
    assert all(" sss" in line for line in out.splitlines() if line.startswith(("passwd", "group")))
