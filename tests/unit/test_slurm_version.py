"""The Slurm release a cluster renders for: spec.slurm.version, else the image tag's, else 26.05."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api.documents import DocumentError, parse_cluster
from slurmkube.api.grammar import InvalidValue
from slurmkube.api.slurm_version import (
    DEFAULT,
    SUPPORTED,
    SlurmVersion,
    cluster_slurm_version,
    image_series,
    parse_slurm_version,
    release_series,
)
from slurmkube.render import plan_config
from slurmkube_local.builders import cluster_docs, nvl_fleet

V2411 = SlurmVersion(24, 11)
V2605 = SlurmVersion(26, 5)


def docs(**spec: Any) -> list[dict[str, Any]]:
    return cluster_docs(extra=spec)


@pytest.mark.parametrize(
    ("release", "series"),
    [
        ("24.11.5", V2411),
        ("26.05.5", V2605),
        ("26.05.5-1", V2605),
        ("slurm-wlm", None),
        ("", None),
    ],
)
def test_a_release_string_names_its_series(release: str, series: SlurmVersion | None) -> None:
    assert release_series(release) == series


@pytest.mark.parametrize(
    ("image", "series"),
    [
        ("slurmkube/slurm:24.11.5", V2411),
        ("slurmkube/slurm:26.05.5", V2605),
        ("slurmkube/slurm:26.05", V2605),
        ("registry.example:5000/team/slurm:v24.11.3", V2411),
        ("slurm:26.05.5-1", V2605),
        ("slurm:24.11-rocky9", V2411),
        ("slurm:25.11.2", SlurmVersion(25, 11)),
        ("slurm:24.11.5@sha256:" + "a" * 64, V2411),
        # No series in the tag: none derived.
        ("slurmkube/slurm", None),
        ("registry.example:5000/slurm", None),
        ("slurmkube/slurm:latest", None),
        ("slurmkube/slurm:2411", None),
        ("slurmkube/slurm@sha256:" + "a" * 64, None),
        ("slurmkube/slurm:24.11x", None),
    ],
)
def test_image_tag_names_its_release_series(image: str, series: SlurmVersion | None) -> None:
    assert image_series(image) == series


@pytest.mark.parametrize(
    ("version", "image", "expected"),
    [
        # The spec's version wins over the image's tag.
        ("26.05", "slurmkube/slurm:24.11.5", V2605),
        ("24.11", "slurmkube/slurm:26.05.5", V2411),
        ("24.11", "my/slurm:25.11.1", V2411),
        # Unset: the tag's series.
        (None, "slurmkube/slurm:24.11.5", V2411),
        (None, "slurmkube/slurm:26.05.5", V2605),
        # Unset and no series in the tag: the default.
        (None, "slurmkube/slurm:latest", DEFAULT),
        (None, "slurmkube/slurm", DEFAULT),
    ],
)
def test_cluster_version_is_the_spec_then_the_image_tag_then_the_default(
    version: str | None, image: str, expected: SlurmVersion
) -> None:
    assert cluster_slurm_version(version, image, "SlurmCluster c spec") == expected


def test_the_default_is_26_05_and_both_series_are_supported() -> None:
    assert DEFAULT == V2605
    assert SUPPORTED == (V2411, V2605)
    assert [str(v) for v in SUPPORTED] == ["24.11", "26.05"]


@pytest.mark.parametrize(
    ("version", "yaml_topology", "openmetrics"),
    [(V2411, False, False), (SlurmVersion(25, 5), True, False), (V2605, True, True)],
)
def test_what_each_release_reads(
    version: SlurmVersion, yaml_topology: bool, openmetrics: bool
) -> None:
    assert version.reads_topology_yaml is yaml_topology
    assert version.serves_openmetrics is openmetrics


@pytest.mark.parametrize("text", ["25.11", "26.5", "26.05.5", "v26.05", "", "latest", 26.05, None])
def test_an_unsupported_version_names_the_field_and_what_is_accepted(text: object) -> None:
    with pytest.raises(InvalidValue) as err:
        parse_slurm_version(text, "SlurmCluster c spec.slurm.version")
    assert str(err.value).startswith("SlurmCluster c spec.slurm.version: ")
    assert "24.11, 26.05" in str(err.value)


def test_an_image_of_an_unsupported_series_is_refused_unless_the_version_is_set() -> None:
    with pytest.raises(InvalidValue) as err:
        cluster_slurm_version(None, "my/slurm:25.11.1", "SlurmCluster c spec")
    assert str(err.value).startswith("SlurmCluster c spec.image: 'my/slurm:25.11.1'")
    assert "spec.slurm.version" in str(err.value)


@given(st.sampled_from(SUPPORTED))
def test_a_supported_version_round_trips_through_its_name(version: SlurmVersion) -> None:
    assert parse_slurm_version(str(version), "v") == version


# --- the SlurmCluster model -----------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "24.11"),  # the default image is slurmkube/slurm:24.11.5
        ({"image": "slurmkube/slurm:26.05.5"}, "26.05"),
        ({"image": "slurmkube/slurm:latest"}, "26.05"),
        ({"slurm": {"version": "26.05"}}, "26.05"),
        ({"image": "slurmkube/slurm:26.05.5", "slurm": {"version": "24.11"}}, "24.11"),
    ],
)
def test_a_cluster_renders_for_the_version_its_spec_gives(
    spec: dict[str, Any], expected: str
) -> None:
    assert str(parse_cluster(docs(**spec)).cluster.slurm_version) == expected


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"slurm": {"version": "25.11"}}, ["spec.slurm.version", "'25.11'", "24.11, 26.05"]),
        (
            {
                "slurm": {"version": "26.05"},
                "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "topology": "ring"}],
            },
            ["partitions.0.topology", "'nvlink'", "'network'", "'flat'"],
        ),
    ],
)
def test_what_the_crd_schema_refuses_the_model_refuses_naming_the_field(
    spec: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(DocumentError) as err:
        parse_cluster(docs(**spec))
    message = str(err.value)
    assert message.startswith("document 0: SlurmCluster test: spec")
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"image": "slurm:25.11.2"},
            "SlurmCluster test spec.image: 'slurm:25.11.2' is not valid; expected an image "
            "of a supported Slurm release (24.11, 26.05), or spec.slurm.version set to the "
            "release it runs",
        ),
        (
            {"partitions": [{"name": "gpu", "nodeSets": ["gpu"], "topology": "nvlink"}]},
            "SlurmCluster test spec.partitions[0].topology: 'nvlink' is not valid; expected no "
            "value: Topology= needs Slurm 25.05+ (topology.yaml), and the cluster renders for "
            "24.11 (spec.slurm.version, else the tag of spec.image)",
        ),
    ],
)
def test_what_only_the_release_decides_is_an_invalid_spec_naming_the_field(
    spec: dict[str, Any], message: str
) -> None:
    """The CRD cannot read an image tag: the config fails (InvalidSpec in the
    cluster's status, exit 2 in `slurmkube render`) instead of the object."""
    cluster = parse_cluster(docs(**spec))
    with pytest.raises(InvalidValue) as err:
        plan_config(cluster, nvl_fleet(1, 2))
    assert str(err.value) == message
