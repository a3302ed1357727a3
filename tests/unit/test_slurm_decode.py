"""decode_object: json.loads, but one array converted item by item."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.slurm.decode import decode_object
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.parse import node_from, nodes_from
from slurmkube.slurm.responses import check_response

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "rest"

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.text(), _json), st.sampled_from(["", " ", "\n  ", "\t"]))
def test_without_a_converted_key_it_is_json_loads(doc: dict[str, Any], space: str) -> None:
    for text in (json.dumps(doc), json.dumps(doc, indent=2), space + json.dumps(doc) + space):
        assert decode_object(text, {}) == json.loads(text)


@given(st.lists(_json, max_size=6), st.integers(min_value=0, max_value=2))
def test_the_converted_array_holds_each_item_converted_with_its_index(
    items: list[Any], indent: int
) -> None:
    text = json.dumps({"meta": {"a": [1]}, "items": items, "errors": []}, indent=indent or None)
    doc = decode_object(text, {"items": lambda i, item: (i, item)})
    assert doc == {"meta": {"a": [1]}, "items": list(enumerate(items)), "errors": []}


def test_a_converted_key_that_holds_no_array_decodes_as_is() -> None:
    assert decode_object('{"items": null}', {"items": lambda i, x: 1 / 0}) == {"items": None}


@pytest.mark.parametrize("text", ["[1, 2]", '"x"', "3", " null "])
def test_a_document_that_is_no_object_decodes_as_json_loads(text: str) -> None:
    assert decode_object(text, {"items": lambda i, x: x}) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"a" 1}',
        '{"a": 1,}',
        '{"a": [1,]}',
        '{"a": [1 2]}',
        '{"a": 1} x',
        "{a: 1}",
        '{"a": 1',
    ],
)
def test_malformed_json_raises_like_json_loads(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        decode_object(text, {"a": lambda i, x: x})


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42"])
def test_recorded_nodes_converted_while_decoding_equal_the_parsed_document(version: str) -> None:
    text = json.dumps(json.loads((FIXTURES / version / "nodes.json").read_text())["body"])
    streamed = nodes_from(check_response(200, text, "list nodes", {"nodes": node_from}))
    assert streamed == nodes_from(json.loads(text))
    assert len(streamed) == 10


def test_a_node_slurm_should_not_send_is_named_by_its_index() -> None:
    text = json.dumps({"nodes": [{"name": "a"}, {"name": ["not", "a", "name"]}]})
    with pytest.raises(SlurmError, match="'nodes' item 1"):
        check_response(200, text, "list nodes", {"nodes": node_from})
