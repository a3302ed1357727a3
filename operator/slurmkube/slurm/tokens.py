"""JWTs for slurmrestd and scontrol, minted from a cluster's jwt.key as Slurm's
auth/jwt expects (HS256; `exp`, `iat`, `sun` = username; jwt.html)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import jwt

from slurmkube.slurm import arguments


class JwtMinter:
    """Mints HS256 tokens from jwt.key and reuses one until half its life is gone."""

    def __init__(self, key: bytes, user: str, lifespan: int = 1800) -> None:
        if not key:
            raise ValueError("empty JWT key")
        self._key = key
        self._user = arguments.user_name(user, "JWT user")
        self._lifespan = lifespan
        self._token = ""
        self._renew_at = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, user: str, lifespan: int = 1800) -> JwtMinter:
        return cls(Path(path).read_bytes(), user, lifespan)

    def __call__(self) -> str:
        with self._lock:
            now = time.time()
            if now >= self._renew_at:
                issued = int(now)
                claims = {"iat": issued, "exp": issued + self._lifespan, "sun": self._user}
                self._token = jwt.encode(claims, self._key, algorithm="HS256")
                self._renew_at = now + self._lifespan / 2
            return self._token


def token_source(
    user: str,
    *,
    token: str | None = None,
    jwt_key: bytes | None = None,
    jwt_key_file: str | Path | None = None,
) -> Callable[[], str]:
    """Exactly one of `token` (used as is) or `jwt_key`/`jwt_key_file` (tokens
    minted for `user`)."""
    sources = [s for s in (token, jwt_key, jwt_key_file) if s is not None]
    if len(sources) != 1:
        raise ValueError("give exactly one of token, jwt_key, jwt_key_file")
    if token is not None:
        return lambda: token
    if jwt_key is not None:
        return JwtMinter(jwt_key, user)
    assert jwt_key_file is not None
    return JwtMinter.from_file(jwt_key_file, user)
