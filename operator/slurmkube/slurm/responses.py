"""slurmrestd's answers: an HTTP status and body -> the JSON document, or the
typed SlurmError it means (errno blocks from slurm_errno.h)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from slurmkube.slurm.decode import Converters, decode_object
from slurmkube.slurm.errors import (
    SlurmAuthError,
    SlurmError,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnreachable,
)
from slurmkube.slurm.parse import SlurmMessage, messages_from

_TRANSIENT_STATUS: Final = frozenset({502, 503, 504})
# slurm_errno.h: SLURM_PROTOCOL_AUTHENTICATION_ERROR, ESLURM_ACCESS_DENIED,
# ESLURM_USER_ID_MISSING, and the ESLURM_AUTH_* block.
_AUTH_ERRNOS: Final = frozenset({1007, 2002, 2010, *range(6000, 6012)})
# ESLURM_INVALID_JOB_ID, ESLURM_INVALID_NODE_NAME.
_NOT_FOUND_ERRNOS: Final = frozenset({2017, 2018})
# Slurm's comm errors (SLURM_COMMUNICATIONS_*, SLURMCTLD_COMMUNICATIONS_*).
_UNREACHABLE_ERRNOS: Final = frozenset({*range(1001, 1005), *range(1800, 1806)})


def _message(doc: Mapping[str, Any] | None, text: str, status: int) -> str:
    errors = messages_from(doc) if doc is not None else ()
    if errors:
        return "; ".join(str(e) for e in errors)
    return text.strip()[:500] or f"HTTP {status}"


def check_response(
    status: int,
    text: str,
    operation: str,
    convert: Converters | None = None,
) -> Mapping[str, Any]:
    """A slurmrestd answer -> its JSON document, or the SlurmError it means. The
    arrays under `convert`'s keys are converted while decoding (decode_object)."""
    if status == 304:
        # Not Modified (RFC 7232 4.1): slurmctld has no change since the
        # update_time asked about (SLURM_NO_CHANGE_IN_DATA), and sends nothing.
        return {}
    doc: Mapping[str, Any] | None = None
    try:
        parsed = decode_object(text, convert or {}) if text else None
        if isinstance(parsed, Mapping):
            doc = parsed
    except json.JSONDecodeError:
        pass
    errors: tuple[SlurmMessage, ...] = messages_from(doc) if doc is not None else ()
    numbers = {e.error_number for e in errors}
    message = _message(doc, text, status)
    if status in (401, 403, 511) or numbers & _AUTH_ERRNOS:
        raise SlurmAuthError(message, operation=operation)
    if status in _TRANSIENT_STATUS or numbers & _UNREACHABLE_ERRNOS:
        raise SlurmUnreachable(message, operation=operation)
    if status == 404 or numbers & _NOT_FOUND_ERRNOS:
        raise SlurmNotFound(message, operation=operation)
    if status >= 400 or (numbers - {0}):
        raise SlurmRejected(message, operation=operation)
    if doc is None:
        raise SlurmError(f"slurmrestd answered without JSON: {text[:200]!r}", operation=operation)
    return doc
