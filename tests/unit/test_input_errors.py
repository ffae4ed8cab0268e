"""Every input file a user hands the bundle, broken once: one line on stderr naming the
file and the line, exit 2, no traceback (docs/reading-the-report.md, "Exit codes")."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tiny_tokenizer import write_tokenizer

from prefixbench.frontend import cli
from prefixbench.measure.yamlfile import (
    YamlFileError,
    check_inventory_yaml,
    inventory_yaml_problem,
)

REPO = Path(__file__).resolve().parents[2]

#: A mapping whose second key is indented deeper than the first: "mapping values are
#: not allowed here" at line 3 (PyYAML's scanner), the mistake of the issue's workloads file.
BAD_INDENT = "workloads:\n  - name: mine\n     dataset_name: random\n"


def one_line_error(argv: list[str], where: str, monkeypatch: pytest.MonkeyPatch,
                   cwd: Path | None = None) -> str:
    if cwd is not None:
        monkeypatch.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    # report and compare write to the process's streams (they own their arguments).
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("sys.stdout", out)
    code = cli.main(argv, out=out, err=err)
    text = err.getvalue()
    assert code == 2, (code, out.getvalue(), text)
    assert text.count("\n") == 1, text
    assert where in text, text
    assert "Traceback" not in text
    return text


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "inventories" / "mine" / "group_vars" / "all").mkdir(parents=True)
    (root / "benchmark.yml").write_text("---\n")
    (root / "inventories" / "mine" / "hosts.yml").write_text(
        "all:\n  hosts:\n    trn-1:\n      ansible_host: 10.0.0.1\n")
    (root / "inventories" / "mine" / "group_vars" / "all" / "main.yml").write_text(
        "prefixbench_repetitions: 3\n")
    return root


def test_a_workloads_file_with_an_indentation_error(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "workloads.yml"
    bad.write_text(BAD_INDENT)
    line = one_line_error(["whatif", "--workload", "mine", "--workloads", str(bad)],
                          f"{bad}:3:", monkeypatch)
    assert "YAML syntax error" in line


def test_a_prompts_file_with_a_broken_line(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "a"}\n{"prompt": "b"\n')
    tok = write_tokenizer(tmp_path / "tok")
    one_line_error(["whatif", str(prompts), "--tokenizer", str(tok)],
                   f"{prompts}:2", monkeypatch)


def test_an_inventory_group_vars_file_with_a_yaml_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    broken = root / "inventories" / "mine" / "group_vars" / "all" / "main.yml"
    broken.write_text("prefixbench_repetitions: 3\nvllm_env_x: [a, b\n")
    line = one_line_error(["run", "-i", "inventories/mine", "--project-dir", str(root)],
                          f"{broken}:", monkeypatch, cwd=root)
    assert line.startswith("prefixbench run: error: inventory inventories/mine: ")


def test_an_inventory_hosts_file_with_a_yaml_error(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    hosts = root / "inventories" / "mine" / "hosts.yml"
    hosts.write_text("all:\n  hosts:\n    trn-1:\n   ansible_host: 10.0.0.1\n")
    one_line_error(["run", "-i", "inventories/mine", "--project-dir", str(root)],
                   f"{hosts}:4:", monkeypatch, cwd=root)


def test_a_settings_file_with_a_yaml_error(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    settings = root / "settings.yml"
    settings.write_text("prefixbench_repetitions: 3\n  vllm_env_y: 1\n")
    one_line_error(["run", "-i", "inventories/mine", "-e", "@settings.yml",
                    "--project-dir", str(root)], "settings.yml:2:", monkeypatch, cwd=root)


def test_a_tolerances_file_with_a_yaml_error(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from report_runs import make_run  # noqa: PLC0415

    run = make_run(tmp_path, benches=(("cached", "high_overlap"),))
    tol = tmp_path / "tol.yml"
    tol.write_text("tolerances:\n  median_ttft_ms: {rel: 0.1\n")
    one_line_error(["compare", str(run), str(run), "--tolerances", str(tol)],
                   f"{tol}:", monkeypatch)


@pytest.mark.parametrize("inventory", ["trn2_fleet", "aws", "sim"])
def test_the_shipped_inventories_parse(inventory: str) -> None:
    assert inventory_yaml_problem(REPO / "inventories" / inventory) is None


def test_ansible_tags_are_not_syntax_errors(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.yml").write_text("all:\n  hosts: {a: {}}\n")
    (tmp_path / "group_vars" / "all.yml").write_text(
        "token: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\nraw: !unsafe '{{ x }}'\n")
    check_inventory_yaml(tmp_path)
    (tmp_path / "group_vars" / "all.yml").write_text("a: 'unterminated\n")
    with pytest.raises(YamlFileError, match=r"group_vars/all\.yml:\d+:\d+: YAML syntax"):
        check_inventory_yaml(tmp_path)


def test_a_host_vars_file_with_a_yaml_error_stops_the_doctor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    broken = root / "inventories" / "mine" / "host_vars" / "trn-1.yml"
    broken.parent.mkdir()
    broken.write_text("vllm_service_port: 8000\n\tprefixbench_repetitions: 2\n")
    (root / "playbooks").mkdir()
    (root / "playbooks" / "doctor.yml").write_text("---\n")
    line = one_line_error(["doctor", "-i", "inventories/mine", "--project-dir", str(root)],
                          f"{broken}:2:", monkeypatch, cwd=root)
    assert "YAML syntax error" in line
