"""Every role's argument specs and defaults agree with the settings catalogue.

The catalogue (src/prefixbench/settings.py) owns the variables it declares: their
defaults, choices and kinds. A role that also declares one of them (in
meta/argument_specs.yml or defaults/main.yml) must say the same, or a host would get one
value from preflight and another from the role. Each role's defaults mirror its main
entry point's options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from prefixbench import settings

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta").is_dir())

#: Argument-spec types that can carry each catalogue kind.
SPEC_TYPES = {"str": {"str", "path", "raw"}, "int": {"int", "raw"}, "bool": {"bool", "raw"},
              "float": {"float", "raw"}, "list_int": {"list", "raw"},
              "list_str": {"list", "raw"}, "dict": {"dict", "raw"},
              "list_dict": {"list", "raw"}}


def specs(role: Path) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    entries: dict[str, dict[str, Any]] = data["argument_specs"]
    return entries


def defaults(role: Path) -> dict[str, Any]:
    path = role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def options(role: Path) -> list[tuple[str, str, dict[str, Any]]]:
    return [(entry, name, opt or {}) for entry, spec in specs(role).items()
            for name, opt in (spec.get("options") or {}).items()]


def test_every_role_has_specs_and_defaults() -> None:
    assert ROLES
    for role in ROLES:
        assert (role / "meta" / "argument_specs.yml").is_file(), role.name
        assert (role / "defaults" / "main.yml").is_file(), role.name
        assert "main" in specs(role), role.name


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_specs_agree_with_the_catalogue(role: Path) -> None:
    problems = []
    for entry, name, opt in options(role):
        setting = settings.BY_NAME.get(name)
        if setting is None:
            continue
        where = f"{role.name} {entry}.{name}"
        if opt.get("type", "str") not in SPEC_TYPES[setting.kind]:
            problems.append(f"{where}: type {opt.get('type')} for a {setting.kind} setting")
        if "default" in opt and not setting.required \
                and opt["default"] != setting.default:
            problems.append(f"{where}: default {opt['default']!r}, the catalogue says "
                            f"{setting.default!r}")
        if "choices" in opt or setting.choices is not None:
            theirs = sorted(map(str, opt.get("choices") or []))
            ours = sorted(map(str, setting.choices or []))
            if theirs != ours:
                problems.append(f"{where}: choices {theirs}, the catalogue says {ours}")
        if setting.secret and not opt.get("no_log"):
            problems.append(f"{where}: a secret setting without no_log")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_agree_with_the_catalogue_and_the_specs(role: Path) -> None:
    main = specs(role)["main"].get("options") or {}
    problems = []
    for name, value in defaults(role).items():
        setting = settings.BY_NAME.get(name)
        if setting is not None and not setting.required and value != setting.default:
            problems.append(f"{role.name} defaults {name}: {value!r}, the catalogue says "
                            f"{setting.default!r}")
        if name not in main:
            problems.append(f"{role.name} defaults {name}: not an option of the main "
                            "entry point")
        elif main[name].get("default") != value:
            problems.append(f"{role.name} defaults {name}: {value!r}, the argument spec "
                            f"says {main[name].get('default')!r}")
    for name, opt in main.items():
        if "default" in opt and name not in defaults(role):
            problems.append(f"{role.name} {name}: a default in the argument spec but not "
                            "in defaults/main.yml")
    assert not problems, "\n".join(problems)


def test_the_consistency_check_sees_a_disagreement(tmp_path: Path) -> None:
    """The check above is not vacuous: a role that disagrees is reported."""
    role = tmp_path / "model_cache"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": {
        "main": {"options": {
            "model_cache_source": {"type": "str", "default": "s3", "choices": ["hf", "s3"]},
            "model_cache_hf_token": {"type": "str"}}}}}))
    (role / "defaults" / "main.yml").write_text("model_cache_source: s3\n")
    with pytest.raises(AssertionError) as failed:
        test_specs_agree_with_the_catalogue(role)
    text = str(failed.value)
    assert "default 's3', the catalogue says 'hf'" in text
    assert "choices ['hf', 's3'], the catalogue says ['hf', 'local', 's3', 'url']" in text
    assert "model_cache_hf_token: a secret setting without no_log" in text
    with pytest.raises(AssertionError, match="the catalogue says 'hf'"):
        test_defaults_agree_with_the_catalogue_and_the_specs(role)


#: Role variables with an owned prefix that the catalogue does not declare. Preflight
#: rejects such a name in an inventory ("not a setting of this bundle"), so each is either
#: a parameter a play passes to the role, or a setting still to be catalogued.
UNCATALOGUED = {
    # Parameters the plays pass (include_role vars), never set in an inventory.
    "vllm_service_configuration", "vllm_service_settings", "vllm_service_vllm_executable",
}


def test_role_variables_with_an_owned_prefix_are_catalogued() -> None:
    found = set()
    for role in ROLES:
        names = set(defaults(role)) | {name for _, name, _ in options(role)}
        found |= {n for n in settings.owned_names(names) if n not in settings.BY_NAME}
    assert found == UNCATALOGUED
