"""A slurmd pod starts slurmd only once slurmctld can serve its config: configless
slurmd that cannot fetch it retries only after 10 s. slurmrestd waits the same
way: a request it takes before slurmctld's name resolves waits half a minute."""

from __future__ import annotations

from typing import Any

from slurmkube.build.slurmctld import controller_service
from slurmkube.build.slurmd import conf_server_wait, slurmd_pod
from slurmkube.build.slurmrestd import restapi_deployment
from slurmkube_local.builders import bundle

Manifest = dict[str, Any]


def pod(image: str | None = None) -> Manifest:
    b = bundle()
    return slurmd_pod(b.cluster, b.node_sets[0], "gpu-0001", 4, "hash", image=image)["spec"]


def conf_server_arg(spec: Manifest) -> str:
    args = spec["containers"][0]["args"]
    return str(args[args.index("--conf-server") + 1])


def test_slurmd_waits_for_the_conf_server_it_fetches_from() -> None:
    spec = pod()
    (wait,) = spec["initContainers"]
    host, port = wait["command"][-2:]
    assert f"{host}:{port}" == conf_server_arg(spec)


def test_the_wait_runs_from_the_image_slurmd_runs() -> None:
    for image in (None, "registry.example/slurm:26.05.5"):
        spec = pod(image)
        assert spec["initContainers"][0]["image"] == spec["containers"][0]["image"]


def test_the_wait_names_its_own_command_not_the_images_entrypoint() -> None:
    # The entrypoint runs daemons only; the wait must work where there is none too.
    wait = conf_server_wait("ctld.example", 6817, image="img")
    assert wait["command"][:2] == ["bash", "-c"]
    assert "args" not in wait


def test_slurmctlds_name_resolves_before_it_is_ready() -> None:
    # The wait ends when slurmctld listens, which is before its pod is Ready.
    spec = controller_service(bundle().cluster)["spec"]
    assert spec["clusterIP"] == "None"
    assert spec["publishNotReadyAddresses"] is True


def test_slurmrestd_waits_for_the_slurmctld_slurmd_waits_for() -> None:
    restd = restapi_deployment(bundle().cluster)["spec"]["template"]["spec"]
    (wait,) = restd["initContainers"]
    assert wait["command"] == pod()["initContainers"][0]["command"]
    assert wait["image"] == restd["containers"][0]["image"]
    # slurmrestd runs unprivileged; so does its wait.
    assert wait["securityContext"]["runAsNonRoot"] is True
    assert wait["securityContext"]["capabilities"] == {"drop": ["ALL"]}
