"""A broken YAML file of an inventory, met by ``ansible-playbook benchmark.yml -i <inventory>``
run directly: one line, ``file:line:column: what is wrong``, and no play starts (the
bundle's prefixbench_yaml_check vars plugin and prefixbench_yaml inventory plugin, over
prefixbench.measure.yamlfile). Without them ansible-core 2.21 printed "[ERROR]: YAML
parsing failed: Mapping values are not allowed in this context." for a group_vars file
(no file, no line), took a key given twice without a word, and for the hosts file printed
a dozen lines ending "No inventory was parsed"."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleParserError

from prefixbench.measure.yamlfile import inventory_yaml_problem

SAMPLE = "inventories/trn2_fleet"
#: A line of the sample's group_vars/all/model.yml, and one of its hosts.yml.
SETTING = "prefixbench_model_profile: gpt-oss-120b"
HOST_LINE = "          prefixbench_instance_type: trn2.48xlarge\n"

#: Broken text per mistake, in place of SETTING: (the text, the line and column of the
#: error counted from SETTING's line and from 0, words of what the line says). An
#: over-indented key continues the value above until its ":" (column 25), where YAML
#: finds a mapping it cannot start there.
MISTAKES = {
    "indentation": (f"{SETTING}\n  prefixbench_repetitions: 2", (1, 25), "indentation"),
    "tab": (f"{SETTING}\n\tprefixbench_repetitions: 2", (1, 0), "tab character"),
    "duplicate key": (f"{SETTING}\nprefixbench_model_profile: gpt-oss-20b", (1, 0),
                      "duplicate key 'prefixbench_model_profile'"),
    "unclosed quote": ('prefixbench_model_profile: "gpt-oss-120b', None,
                       "closing quote missing on line"),
}


def inventory(tmp_path: Path, repo_root: Path) -> Path:
    """A copy of the sample inventory whose hosts are on loopback (nothing to touch)."""
    copy = tmp_path / "mine"
    shutil.copytree(repo_root / SAMPLE, copy, symlinks=True)
    hosts = copy / "hosts.yml"
    text = hosts.read_text(encoding="utf-8")
    hosts.write_text("\n".join(
        line.split("ansible_host:")[0] + "ansible_host: 127.0.0.1"
        if "ansible_host:" in line else line for line in text.splitlines()) + "\n")
    return copy


def playbook(repo_root: Path, env: dict[str, str], inv: Path, *extra: str
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ansible-playbook", "benchmark.yml", "-i", str(inv), *extra],
                          cwd=repo_root, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    """The run's whole output, checked to be one error line, without it."""
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert out.returncode != 0 and len(lines) == 1, out.stdout + out.stderr
    assert lines[0].startswith("[ERROR]: "), lines
    return lines[0].removeprefix("[ERROR]: ")


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_is_named_with_its_file_and_line(tmp_path: Path, repo_root: Path,
                                                      mistake: str) -> None:
    inv = inventory(tmp_path, repo_root)
    model = inv / "group_vars" / "all" / "model.yml"
    text = model.read_text(encoding="utf-8")
    at = text[:text.index(SETTING)].count("\n") + 1  # SETTING's line, from 1
    broken, where, said = MISTAKES[mistake]
    model.write_text(text.replace(SETTING, broken, 1), encoding="utf-8")
    problem = inventory_yaml_problem(inv)
    assert problem is not None and said in problem, problem
    if where is not None:
        assert problem.startswith(f"{model}:{at + where[0]}:{where[1] + 1}: "), problem
    else:  # PyYAML stops where the runaway quote ends; the hint names the line it opened
        assert problem.startswith(f"{model}:") and f"line {at}?" in problem, problem


@pytest.mark.parametrize("kind", ["group_vars", "host_vars", "hosts file"])
def test_ansible_playbook_stops_in_one_line_before_any_play(
        tmp_path: Path, repo_root: Path, ansible_env: dict[str, str], kind: str) -> None:
    inv = inventory(tmp_path, repo_root)
    if kind == "group_vars":
        broken = inv / "group_vars" / "all" / "model.yml"
        text = broken.read_text(encoding="utf-8")
        line = text[:text.index(SETTING)].count("\n") + 2
        broken.write_text(text.replace(SETTING, MISTAKES["indentation"][0], 1))
        where = f"{broken}:{line}:{MISTAKES['indentation'][1][1] + 1}: "
    elif kind == "host_vars":
        broken = inv / "host_vars" / "trn2-node-01.yml"
        broken.parent.mkdir()
        broken.write_text("---\nvllm_service_port: 8000\nvllm_service_port: 8001\n")
        where = f"{broken}:3:1: "
    else:
        broken = inv / "hosts.yml"
        text = broken.read_text(encoding="utf-8")
        line = text[:text.index(HOST_LINE)].count("\n") + 2
        broken.write_text(text.replace(HOST_LINE, HOST_LINE + "         bad: 1\n", 1))
        where = f"{broken}:{line}:10: "
    for extra in ((), ("--list-hosts",), ("--syntax-check",)):
        said = one_line(playbook(repo_root, ansible_env, inv, *extra))
        assert said.startswith(where), (extra, said)


def test_a_clean_copy_and_an_ini_inventory_still_list_their_hosts(
        tmp_path: Path, repo_root: Path, ansible_env: dict[str, str]) -> None:
    listed = playbook(repo_root, ansible_env, inventory(tmp_path, repo_root), "--list-hosts")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert all(h in listed.stdout for h in ("trn2-node-01", "trn2-node-02", "trn3-node-01"))
    ini = tmp_path / "ini"
    shutil.copytree(repo_root / SAMPLE / "group_vars", ini / "group_vars")
    (ini / "hosts").write_text("[trn2]\ntrn2-ini-1 ansible_host=127.0.0.1 "
                               "prefixbench_instance_type=trn2.48xlarge\n"
                               "[neuron_fleet:children]\ntrn2\n")
    listed = playbook(repo_root, ansible_env, ini, "--list-hosts")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "trn2-ini-1" in listed.stdout


def load_vars_plugin(repo_root: Path) -> Any:
    """plugins/vars/prefixbench_yaml_check.py as a module of its own (its cache empty)."""
    path = repo_root / "plugins" / "vars" / "prefixbench_yaml_check.py"
    spec = importlib.util.spec_from_file_location("prefixbench_yaml_check_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_vars_plugin_parses_an_inventory_once_until_a_file_changes(
        tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ansible asks the plugin once per group and host, each time from a new instance
    (ansible-core 2.21: 8 instances for the sample's 3 hosts and 5 groups, each parsing the
    whole inventory): one parse serves them all while the files are unchanged, and a file
    broken since the last parse is still refused."""
    plugin = load_vars_plugin(repo_root)
    inv = inventory(tmp_path, repo_root)
    parses: list[str] = []

    def counted(path: str) -> str | None:
        parses.append(path)
        return inventory_yaml_problem(path)

    monkeypatch.setattr(plugin, "inventory_yaml_problem", counted)
    for _entity in range(8):
        assert plugin.VarsModule().get_vars(None, str(inv), []) == {}
    assert parses == [str(inv)]

    model = inv / "group_vars" / "all" / "model.yml"
    text = model.read_text(encoding="utf-8")
    model.write_text(text.replace(SETTING, MISTAKES["indentation"][0]), encoding="utf-8")
    with pytest.raises(AnsibleParserError, match=r"model\.yml:\d+:26: YAML syntax error"):
        plugin.VarsModule().get_vars(None, str(inv), [])
    assert len(parses) == 2
    model.write_text(text, encoding="utf-8")
    assert plugin.VarsModule().get_vars(None, str(inv), []) == {}
    assert plugin.VarsModule().get_vars(None, str(inv), []) == {}
    assert len(parses) == 3
