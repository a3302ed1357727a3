"""The cluster's keys as a Secret (pure)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import Manifest, meta, names_of
from slurmkube.build.pod import SLURM_KEY


def auth_secret(cluster: SlurmCluster, slurm_key_b64: str, jwt_key_b64: str) -> Manifest:
    """Keys are generated once by the controller and then only ever read back."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(cluster, names_of(cluster).auth, "slurm-auth"),
        "type": "Opaque",
        "data": {SLURM_KEY: slurm_key_b64, "jwt.key": jwt_key_b64},
    }


def key_set(keys: Sequence[tuple[str, bytes, bool]]) -> str:
    """auth/slurm's `slurm.jwks` of (kid, key, default) (plan/key_rotation.py): HS256
    keys of kind `oct`, the key base64url-encoded without padding."""
    return json.dumps(
        {
            "keys": [
                {
                    "kty": "oct",
                    "alg": "HS256",
                    "kid": kid,
                    "k": base64.urlsafe_b64encode(key).rstrip(b"=").decode(),
                    **({"use": "default"} if default else {}),
                }
                for kid, key, default in keys
            ]
        },
        sort_keys=True,
    )


def key_set_keys(text: str) -> dict[str, tuple[bytes, bool]]:
    """kid -> (key, default) of a `slurm.jwks` this module wrote."""
    found: dict[str, tuple[bytes, bool]] = {}
    for item in json.loads(text).get("keys") or []:
        k = str(item["k"])
        key = base64.urlsafe_b64decode(k + "=" * (-len(k) % 4))
        found[str(item["kid"])] = (key, item.get("use") == "default")
    return found


def restapi_tls_secret(cluster: SlurmCluster, ca: bytes, cert: bytes, key: bytes) -> Manifest:
    """slurmrestd's certificate as the operator issues it (build/slurmrestd.py reads
    `tls.crt` and `tls.key`; clients trust `ca.crt`)."""

    def b64(value: bytes) -> str:
        return base64.b64encode(value).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(cluster, names_of(cluster).restapi_tls, "slurmrestd"),
        "type": "kubernetes.io/tls",
        "data": {"ca.crt": b64(ca), "tls.crt": b64(cert), "tls.key": b64(key)},
    }
