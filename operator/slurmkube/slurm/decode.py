"""JSON decoding that converts one large array item by item. Pure, no I/O.

slurmrestd answers `/nodes/` for 10,000 nodes with ~20 MB of JSON: `json.loads`
would hold every node's raw dict (~50 MB, a dozen nested dicts each) before any
is read, and the allocator keeps that high-water mark as the operator's
resident size. Decoding the array one item at a time, each converted to its
small model on the spot, keeps no more than one raw item alive.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from json.decoder import WHITESPACE  # type: ignore[attr-defined]
from typing import Any

__all__ = ["Converters", "decode_object"]

# Per key of the top-level object: what each item of the array there becomes,
# given its index and its decoded JSON.
Converters = Mapping[str, Callable[[int, Any], Any]]

_DECODER = json.JSONDecoder()


def _skip(text: str, at: int) -> int:
    end: int = WHITESPACE.match(text, at).end()
    return end


def _expect(text: str, at: int, chars: str) -> str:
    if at >= len(text) or text[at] not in chars:
        expected = " or ".join(repr(c) for c in chars)
        raise json.JSONDecodeError(f"Expecting {expected}", text, at)
    return text[at]


def decode_object(text: str, convert: Converters) -> dict[str, Any]:
    """The JSON object in `text`; the array under each key of `convert` comes back
    as a list of `convert[key](index, item)`, decoded and converted one item at a
    time. Anything else (a non-object document, a key whose value is no array)
    decodes as `json.loads` would. Raises json.JSONDecodeError like it."""
    at = _skip(text, 0)
    if at >= len(text) or text[at] != "{":
        value, end = _DECODER.raw_decode(text, at)
        if _skip(text, end) != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
        return value  # type: ignore[no-any-return]
    doc: dict[str, Any] = {}
    at = _skip(text, at + 1)
    if text.startswith("}", at):
        at += 1
    else:
        while True:
            _expect(text, at, '"')
            key, at = _DECODER.raw_decode(text, at)
            at = _skip(text, at)
            _expect(text, at, ":")
            at = _skip(text, at + 1)
            item = convert.get(key)
            if item is not None and text.startswith("[", at):
                doc[key], at = _converted_array(text, at, item)
            else:
                doc[key], at = _DECODER.raw_decode(text, at)
            at = _skip(text, at)
            if _expect(text, at, ",}") == "}":
                at += 1
                break
            at = _skip(text, at + 1)
    if _skip(text, at) != len(text):
        raise json.JSONDecodeError("Extra data", text, at)
    return doc


def _converted_array(
    text: str, at: int, convert: Callable[[int, Any], Any]
) -> tuple[list[Any], int]:
    out: list[Any] = []
    at = _skip(text, at + 1)
    if text.startswith("]", at):
        return out, at + 1
    while True:
        raw, at = _DECODER.raw_decode(text, at)
        out.append(convert(len(out), raw))
        del raw  # so the next item is decoded without this one alive
        at = _skip(text, at)
        if _expect(text, at, ",]") == "]":
            return out, at + 1
        at = _skip(text, at + 1)
