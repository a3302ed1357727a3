"""`spec.extraConfig` is an allow-list: no program key, no key slurmkube renders."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api import grammar, slurm_conf_keys
from slurmkube.api.documents import DocumentError, parse_cluster
from slurmkube.api.grammar import InvalidValue
from slurmkube.cli import main
from slurmkube.render import plan_config, render_files
from slurmkube.render.context import RenderContext
from slurmkube.render.templating import ENV
from slurmkube_local.builders import cluster_docs, nvl_fleet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DIRECTIVE = re.compile(r"^([A-Za-z]+)=", re.MULTILINE)


def template_keys() -> frozenset[str]:
    """Every `Key=` slurm.conf.j2 can print, in any branch of its conditionals."""
    assert ENV.loader is not None
    source, _, _ = ENV.loader.get_source(ENV, "slurm.conf.j2")
    return frozenset(k.lower() for k in DIRECTIVE.findall(source))


def reference_keys() -> frozenset[str]:
    """The keys of a config rendered with every feature on: accounting, cgroups,
    config_overrides, autoscaling with a minimum (SuspendExcNodes), extra lines."""
    docs = cluster_docs(block_size=2, extra={"extraConfig": ["KillWait=30"]})
    docs[1]["spec"]["autoscaling"] = {"enabled": True, "minNodes": 1}
    ctx = RenderContext(accounting_host="slurmdbd", config_overrides=True)
    text = render_files(plan_config(parse_cluster(docs), nvl_fleet(2, 2), ctx)).files["slurm.conf"]
    return frozenset(k.lower() for k in DIRECTIVE.findall(text)) - {"killwait"}


def test_the_reference_config_renders_only_template_keys() -> None:
    # Guards the two collections below against each other: the template scan
    # sees every branch, the rendered config proves the scan parses real lines.
    keys = reference_keys()
    assert {"slurmctldparameters", "suspendexcnodes", "accountingstoragetype"} <= keys
    assert keys <= template_keys()


def test_every_rendered_key_is_known_as_rendered() -> None:
    defaulted = slurm_conf_keys.DEFAULTED_KEYS
    assert template_keys() - defaulted <= slurm_conf_keys.RENDERED_KEYS
    assert defaulted <= slurm_conf_keys.EXTRA_CONFIG_KEYS  # a default the user may set


def test_no_allowed_key_is_rendered_or_runs_a_program() -> None:
    allowed = slurm_conf_keys.EXTRA_CONFIG_KEYS
    assert not allowed & (template_keys() - slurm_conf_keys.DEFAULTED_KEYS)
    assert not allowed & slurm_conf_keys.RENDERED_KEYS
    assert not allowed & slurm_conf_keys.PROGRAM_KEYS


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("HealthCheckProgram=/tmp/x", "HealthCheckProgram names a program"),
        ("RebootProgram=/sbin/reboot", "names a program"),
        ("Prolog=/tmp/p", "names a program"),
        ("Epilog=/tmp/e", "names a program"),
        ("PrologSlurmctld=/tmp/p", "names a program"),
        ("EpilogSlurmctld=/tmp/e", "names a program"),
        ("TaskProlog=/tmp/p", "names a program"),
        ("TaskEpilog=/tmp/e", "names a program"),
        ("SrunProlog=/tmp/p", "names a program"),
        ("SrunEpilog=/tmp/e", "names a program"),
        ("JobSubmitPlugins=lua", "names a program"),
        ("JobCompType=jobcomp/script", "names a program"),
        ("JobCompLoc=/tmp/script", "names a program"),
        ("MailProg=/tmp/m", "names a program"),
        ("ResumeProgram=/tmp/r", "names a program"),
        ("SuspendProgram=/tmp/s", "names a program"),
        ("ResumeFailProgram=/tmp/f", "names a program"),
        ("UnkillableStepProgram=/tmp/u", "names a program"),
        ("PlugStackConfig=/tmp/plugstack.conf", "names a program"),
        ("healthcheckprogram=/tmp/x", "healthcheckprogram names a program"),
        ("SlurmctldParameters=idle_on_node_suspend", "SlurmctldParameters is set from the spec"),
        ("ProctrackType=proctrack/linuxproc", "ProctrackType is set from the spec"),
        ("MaxJobCount=10", "MaxJobCount is set from the spec"),
        ("Include=/etc/passwd", "Include is set from the spec"),
        ("PriorityWeightAge=1000", "is set from the spec"),
        ("SwitchType=switch/none", "SwitchType is not on the extraConfig allow-list"),
        ("NoSuchKey=1", "NoSuchKey is not on the extraConfig allow-list"),
    ],
)
def test_refused_keys_name_the_key_and_why(line: str, why: str) -> None:
    with pytest.raises(InvalidValue) as err:
        grammar.config_line(line, "spec.extraConfig[2]")
    assert str(err.value).startswith(f"spec.extraConfig[2]: {line!r} is not valid")
    assert why in str(err.value)


@pytest.mark.parametrize(
    "line", ["KillWait=30", "MaxArraySize=100001", "PrologFlags=Contain", "jobrequeue=0"]
)
def test_allowed_keys_pass(line: str) -> None:
    assert grammar.config_line(line, "spec.extraConfig[0]") == line


@given(
    key=st.text(alphabet=st.characters(min_codepoint=65, max_codepoint=122), min_size=2),
    value=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1),
)
def test_an_accepted_line_never_sets_a_program_or_rendered_key(key: str, value: str) -> None:
    try:
        token = grammar.config_line(f"{key}={value}", "spec.extraConfig[0]")
    except InvalidValue:
        return
    accepted = token.split("=", 1)[0].lower()
    assert accepted in slurm_conf_keys.EXTRA_CONFIG_KEYS
    assert accepted not in slurm_conf_keys.PROGRAM_KEYS | slurm_conf_keys.RENDERED_KEYS
    assert accepted not in template_keys() - slurm_conf_keys.DEFAULTED_KEYS


@given(
    key=st.sampled_from(
        sorted(slurm_conf_keys.PROGRAM_KEYS | (template_keys() - slurm_conf_keys.DEFAULTED_KEYS))
    )
)
def test_every_program_and_rendered_key_is_refused_in_a_document(key: str) -> None:
    docs = cluster_docs(extra={"extraConfig": ["KillWait=30", f"{key}=/bin/true"]})
    with pytest.raises(DocumentError) as err:
        parse_cluster(docs)
    assert "SlurmCluster test: spec.extraConfig: [1]:" in str(err.value)
    assert f"{key} " in str(err.value)


@pytest.mark.parametrize("line", ["HealthCheckProgram=/tmp/x", "SlurmctldParameters=x"])
def test_render_cli_exits_2_naming_the_field_and_key(
    line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / "cluster.yaml").read_text()))
    docs[0]["spec"]["extraConfig"] = [line]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(docs))
    out = tmp_path / "out"
    argv = ["render", "--cluster", str(bad), "--nodes", str(EXAMPLES / "fleet-nodes.yaml")]
    code = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert "spec.extraConfig: [0]:" in err
    assert line.split("=", maxsplit=1)[0] in err
    assert not out.exists()


def test_the_crd_rule_allows_exactly_the_allow_list() -> None:
    from slurmkube.api.crd import crds

    crd = crds()["slurmkube.io_slurmclusters.yaml"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rule = schema["properties"]["spec"]["properties"]["extraConfig"]["x-kubernetes-validations"]
    listed = set(re.findall(r"'([a-z]+)'", rule[0]["rule"]))
    assert listed == set(slurm_conf_keys.EXTRA_CONFIG_KEYS)


def _listed_after(text: str, heading: str) -> set[str]:
    paragraph = text.split(heading, 1)[1].split("\n\n", 1)[0]
    return {k.lower() for k in re.findall(r"`([A-Za-z]+)`", paragraph)}


def test_security_doc_lists_the_allow_list_and_the_program_keys() -> None:
    text = (EXAMPLES.parent / "docs" / "security.md").read_text()
    assert _listed_after(text, "Allowed:") == slurm_conf_keys.EXTRA_CONFIG_KEYS
    assert _listed_after(text, "Refused as programs") == slurm_conf_keys.PROGRAM_KEYS


def test_gpus_are_a_tracked_tres_unless_extra_config_sets_the_key() -> None:
    """Slurm counts GPUs in CfgTRES, sacct and its OpenMetrics gauges only as a TRES,
    which it tracks only with slurmdbd."""

    def conf(extra: list[str], accounting: str | None = "slurmdbd") -> str:
        docs = cluster_docs(block_size=2, extra={"extraConfig": extra})
        ctx = RenderContext(accounting_host=accounting)
        config = plan_config(parse_cluster(docs), nvl_fleet(2, 2), ctx)
        return render_files(config).files["slurm.conf"]

    assert "\nAccountingStorageTRES=gres/gpu\n" in conf([])
    # Without slurmdbd, slurmctld refuses a gres TRES.
    assert "AccountingStorageTRES" not in conf([], accounting=None)
    mine = conf(["AccountingStorageTRES=gres/gpu,license/matlab"])
    assert mine.count("AccountingStorageTRES=") == 1
    assert "AccountingStorageTRES=gres/gpu,license/matlab" in mine
