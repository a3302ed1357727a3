"""The e2e operators' own identity on the local control plane, so the API
server's audit log holds their requests and no one else's.

A client certificate signed by the cluster's CA for the user
`slurmkube-e2e:<namespace>` in the groups `system:masters` (nothing is
refused while the suite runs: the requests are judged against the chart's RBAC
afterwards, e2e/tests/test_rbac_audit.py) and `slurmkube:e2e-operators` (what
the audit policy logs). On a cluster this checkout did not start (kind) there
is no CA key to sign with, and operators keep the admin kubeconfig.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
from pathlib import Path

import yaml

from slurmkube_e2e.audit import AUDITED_GROUP, operator_user
from slurmkube_e2e.layout import Layout

# Longer than any e2e session; a new session makes new ones.
VALIDITY_DAYS = 7


def is_local_cluster(kubeconfig: Path, layout: Layout) -> bool:
    return kubeconfig.resolve() == layout.kubeconfig.resolve() and (layout.pki / "ca.key").exists()


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def operator_kubeconfig(kubeconfig: Path, namespace: str, directory: Path) -> Path:
    """A kubeconfig for an e2e operator whose chart would be in `namespace`,
    written into `directory`; `kubeconfig` itself when the cluster is not ours."""
    layout = Layout.from_env()
    if not is_local_cluster(kubeconfig, layout):
        return kubeconfig
    directory.mkdir(parents=True, exist_ok=True)
    key, csr, crt = (directory / f"operator-{namespace}.{ext}" for ext in ("key", "csr", "crt"))
    extensions = directory / "client.ext"
    extensions.write_text("keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n")
    subject = f"/O=system:masters/O={AUDITED_GROUP}/CN={operator_user(namespace)}"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    key.chmod(0o600)
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(layout.pki / "ca.crt"),
        "-CAkey",
        str(layout.pki / "ca.key"),
        "-set_serial",
        str(secrets.randbits(120)),
        "-days",
        str(VALIDITY_DAYS),
        "-extfile",
        str(extensions),
        "-out",
        str(crt),
    )
    admin = yaml.safe_load(kubeconfig.read_text())
    user = operator_user(namespace)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": base64.b64encode(crt.read_bytes()).decode(),
                    "client-key-data": base64.b64encode(key.read_bytes()).decode(),
                },
            }
        ],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": user}}],
        "current-context": "operator",
    }
    path = directory / f"operator-{namespace}.kubeconfig"
    _private(path, yaml.safe_dump(config))
    return path
