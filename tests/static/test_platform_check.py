"""vLLM's platform question is asked in the background by the provision phase
(vllm_env_platform_check_later); every playbook that provisions must check the answer
before a server can start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _plays(playbook: Path) -> list[dict[str, Any]]:
    """The plays of ``playbook`` in order, imports expanded."""
    plays: list[dict[str, Any]] = []
    for entry in yaml.safe_load(playbook.read_text()):
        target = entry.get("ansible.builtin.import_playbook")
        if target:
            plays += _plays(playbook.parent / target)
        else:
            plays.append({**entry, "__dir": playbook.parent})
    return plays


def _roles(play: dict[str, Any]) -> list[dict[str, Any]]:
    """Every include_role of the play in order, imported task files expanded."""
    out = []
    todo = list(play.get("tasks") or [])
    while todo:
        task = todo.pop(0)
        imported = task.get("ansible.builtin.import_tasks")
        if imported:
            todo[:0] = yaml.safe_load((play["__dir"] / imported).read_text())
            continue
        todo[:0] = [*(task.get("block") or []), *(task.get("rescue") or []),
                    *(task.get("always") or [])]
        include = task.get("ansible.builtin.include_role")
        if include:
            out.append({**include, "vars": task.get("vars") or {}})
    return out


def _includes(play: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in _roles(play) if i.get("name") == "vllm_env"]


def _asks_later_then_checks(playbook: str) -> tuple[bool, bool]:
    asked = checked = False
    for play in _plays(ROOT / playbook):
        for include in _includes(play):
            if include["vars"].get("vllm_env_platform_check_later"):
                asked = True
            if include.get("tasks_from") == "platform" and asked:
                checked = True
    return asked, checked


def test_every_provisioning_playbook_checks_the_platform_answer_after_asking() -> None:
    assert _asks_later_then_checks("benchmark.yml") == (True, True)
    assert _asks_later_then_checks("playbooks/provision.yml") == (True, True)
    # The deploy phase is where benchmark.yml checks it: before the bench phase.
    steps = [(i.get("name"), i.get("tasks_from"))
             for p in _plays(ROOT / "benchmark.yml") for i in _roles(p)]
    assert steps.index(("vllm_env", "platform")) < steps.index(("prefix_bench", None))
