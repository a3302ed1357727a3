"""The local runtime's image rules (slurmkube_runtime.imagespec, podspec.command_line):
which root filesystem a tag gets, the argv, env and user a container starts with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slurmkube_runtime import imagespec, podspec
from slurmkube_runtime.imagespec import Accounts, HostBuild, ImageConfig, StoreImage

IMAGE_CONFIG = ImageConfig(
    entrypoint=("/usr/bin/tini", "--", "/usr/local/bin/entrypoint.sh"),
    env=(("PATH", "/usr/sbin:/usr/bin"),),
    user="401:401",
)
PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\n"
    "slurm:x:401:401::/var/lib/slurm:/usr/sbin/nologin\n"
    "slurmrestd:x:402:402::/nonexistent:/usr/sbin/nologin\n"
)
GROUP = "root:x:0:\nslurm:x:401:\nslurmrestd:x:402:\nvideo:x:44:\n"
ACCOUNTS = Accounts(PASSWD, GROUP)


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "c", **fields}


def pod(**security: Any) -> dict[str, Any]:
    return {"spec": {"securityContext": security} if security else {}}


@pytest.mark.parametrize(
    ("image", "source"),
    [
        ("slurmkube/slurm:24.11.5", HostBuild()),
        ("slurmkube/slurm:24.11", HostBuild()),
        ("registry.example:5000/slurmkube/slurm:24.11.5", HostBuild()),
        ("slurmkube/slurm", HostBuild()),
        ("slurmkube/slurm@sha256:abc", HostBuild()),
        ("slurmkube/slurm:26.05.5", StoreImage("localhost/slurmkube/slurm:26.05.5")),
        ("localhost/slurmkube/slurm:26.05", StoreImage("localhost/slurmkube/slurm:26.05")),
        (
            "registry.example/slurmkube/slurm:26.05.5@sha256:abc",
            StoreImage("localhost/slurmkube/slurm:26.05.5"),
        ),
        # Not the 24.11 series, though it starts alike.
        ("slurmkube/slurm:24.110", StoreImage("localhost/slurmkube/slurm:24.110")),
    ],
)
def test_a_tag_chooses_the_host_build_or_the_built_image(
    image: str, source: imagespec.ImageSource
) -> None:
    assert imagespec.image_source(image) == source


def test_a_pod_whose_containers_need_different_roots_is_refused() -> None:
    assert imagespec.pod_image_source(["slurmkube/slurm:26.05.5"] * 2) == StoreImage(
        "localhost/slurmkube/slurm:26.05.5"
    )
    with pytest.raises(podspec.SpecError, match="share one filesystem"):
        imagespec.pod_image_source(["slurmkube/slurm:26.05.5", "slurmkube/slurm:24.11.5"])


def test_the_not_built_message_names_the_image_and_make_images() -> None:
    message = imagespec.not_built_message("slurmkube/slurm:26.05.9", "localhost/x:26.05.9")
    assert '"slurmkube/slurm:26.05.9"' in message and "make images" in message


@pytest.mark.parametrize(
    ("fields", "config", "argv"),
    [
        # The operator's daemon containers: args only, after the image's entrypoint.
        ({"args": ["slurmd", "-D"]}, IMAGE_CONFIG, [*IMAGE_CONFIG.entrypoint, "slurmd", "-D"]),
        # command replaces the entrypoint (the config reloader's bash).
        ({"command": ["bash", "-c", "x"]}, IMAGE_CONFIG, ["bash", "-c", "x"]),
        ({"command": ["sh"], "args": ["-c", "y"]}, IMAGE_CONFIG, ["sh", "-c", "y"]),
        # Cmd: used with no args, replaced by args, dropped by command.
        ({}, ImageConfig(entrypoint=("e",), cmd=("c",)), ["e", "c"]),
        ({"args": ["a"]}, ImageConfig(entrypoint=("e",), cmd=("c",)), ["e", "a"]),
        ({"command": ["x"]}, ImageConfig(entrypoint=("e",), cmd=("c",)), ["x"]),
        # The host build has no entrypoint: args run as they are, as before.
        ({"args": ["slurmctld", "-D"]}, ImageConfig(), ["slurmctld", "-D"]),
        ({"command": ["a"], "args": ["b"]}, ImageConfig(), ["a", "b"]),
    ],
)
def test_command_line_follows_the_kubelets_entrypoint_rules(
    fields: dict[str, Any], config: ImageConfig, argv: list[str]
) -> None:
    assert podspec.command_line(container(**fields), {}, config.entrypoint, config.cmd) == argv


def test_only_the_pods_parts_of_the_argv_are_expanded() -> None:
    config = ImageConfig(entrypoint=("$(A)",))
    got = podspec.command_line(container(args=["$(A)", "$$(A)"]), {"A": "1"}, config.entrypoint)
    assert got == ["$(A)", "1", "$(A)"]


def test_a_container_with_nothing_to_run_is_refused() -> None:
    with pytest.raises(podspec.SpecError, match="set command"):
        podspec.command_line(container(), {})


def test_the_environment_starts_from_the_images_env() -> None:
    env = imagespec.image_env(IMAGE_CONFIG, "pod-a")
    assert env == {"PATH": "/usr/sbin:/usr/bin", "HOME": "/root", "HOSTNAME": "pod-a"}
    host = imagespec.image_env(imagespec.host_build_config(Path("/opt/slurm")), "pod-b")
    assert host["PATH"].startswith("/opt/slurm/sbin:/opt/slurm/bin:")


def test_an_oci_config_with_null_fields_reads_as_empty() -> None:
    got = ImageConfig.from_oci({"Env": ["PATH=/bin", "EMPTY=", "A=b=c"], "Cmd": None})
    assert got == ImageConfig(env=(("PATH", "/bin"), ("EMPTY", ""), ("A", "b=c")))
    assert ImageConfig.from_oci(None) == ImageConfig()


@pytest.mark.parametrize(
    ("pod_ctx", "container_ctx", "config", "want"),
    [
        # The image's USER when the pod sets nothing (slurmctld, sackd).
        ({}, {}, IMAGE_CONFIG, (401, 401)),
        # runAsUser wins; the group is the user's primary one (slurmrestd).
        ({}, {"runAsUser": 402}, IMAGE_CONFIG, (402, 402)),
        ({}, {"runAsUser": 0}, IMAGE_CONFIG, (0, 0)),
        ({"runAsUser": 402}, {"runAsGroup": 44}, IMAGE_CONFIG, (402, 44)),
        # The container's context wins over the pod's.
        ({"runAsUser": 0}, {"runAsUser": 401}, IMAGE_CONFIG, (401, 401)),
        # A runAsGroup alone keeps the image's user.
        ({"runAsGroup": 44}, {}, IMAGE_CONFIG, (401, 44)),
        # Names, and a uid the image does not know (group 0, as runtimes do).
        ({}, {}, ImageConfig(user="slurmrestd"), (402, 402)),
        ({}, {}, ImageConfig(user="slurm:video"), (401, 44)),
        ({}, {"runAsUser": 5000}, IMAGE_CONFIG, (5000, 0)),
        # No user in the image, no context: the agent's own (root).
        ({}, {}, ImageConfig(), (None, None)),
    ],
)
def test_a_container_runs_as_its_context_else_the_images_user(
    pod_ctx: dict[str, int],
    container_ctx: dict[str, int],
    config: ImageConfig,
    want: tuple[int | None, int | None],
) -> None:
    c = container(securityContext=container_ctx)
    assert imagespec.run_as(pod(**pod_ctx), c, config, ACCOUNTS) == want


def test_the_host_build_takes_the_context_as_it_is() -> None:
    host = imagespec.host_build_config(Path("/opt/slurm"))
    c = container(securityContext={"runAsUser": 402})
    assert imagespec.run_as(pod(), c, host, None) == (402, None)
    assert imagespec.run_as(pod(), container(), host, None) == (None, None)


@pytest.mark.parametrize("user", ["nobody", "slurm:nogroup"])
def test_an_image_user_the_image_does_not_know_is_refused(user: str) -> None:
    with pytest.raises(podspec.SpecError, match="image user"):
        imagespec.run_as(pod(), container(), ImageConfig(user=user), ACCOUNTS)


_WORD = st.text("abcdefgh$()-", min_size=1, max_size=6)


@given(
    entrypoint=st.lists(_WORD, max_size=3),
    cmd=st.lists(_WORD, max_size=3),
    command=st.lists(_WORD, max_size=3),
    args=st.lists(_WORD, max_size=3),
)
def test_command_line_is_command_or_entrypoint_then_args_or_cmd(
    entrypoint: list[str], cmd: list[str], command: list[str], args: list[str]
) -> None:
    c = container(command=command, args=args)
    want = (command + args) if command else entrypoint + (args or cmd)
    if not want:
        with pytest.raises(podspec.SpecError):
            podspec.command_line(c, {}, entrypoint, cmd)
        return
    # With no variables set, expansion only turns `$$` into `$`.
    expanded = [podspec.expand(a, {}) for a in command + args]
    got = podspec.command_line(c, {}, entrypoint, cmd)
    if command:
        assert got == expanded
    else:
        assert got[: len(entrypoint)] == entrypoint
        assert got[len(entrypoint) :] == (expanded if args else cmd)


@given(
    st.sampled_from(["24.11", "24.11.5", "24.11.0-rc1"])
    | st.from_regex(r"2[5-9]\.\d\d(\.\d)?", fullmatch=True)
)
def test_only_the_host_builds_series_runs_on_the_host(tag: str) -> None:
    source = imagespec.image_source(f"slurmkube/slurm:{tag}")
    assert isinstance(source, HostBuild) == tag.startswith("24.11")
