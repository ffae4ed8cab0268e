"""The roles' argument specs and defaults are generated from the settings catalogue.

Each setting is declared once, in src/prefixbench/config/catalogue.py; ``make specs``
(prefixbench.config.rolespecs) writes the part of each role's meta/argument_specs.yml and
defaults/main.yml that the catalogue owns. The drift test below fails when a committed
file is not what regenerating gives: a generated line edited by hand, or a setting added
to the catalogue without ``make specs``.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from prefixbench.config import catalogue, rolespecs, settings

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta").is_dir())
ROLE_NAMES = [p.name for p in ROLES]


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


def copy_roles(tmp_path: Path) -> Path:
    """A copy of the roles' specs and defaults, regenerated (whatever the checkout's state)."""
    shutil.copytree(ROOT / "roles", tmp_path / "roles",
                    ignore=shutil.ignore_patterns("tasks", "templates", "handlers"))
    rolespecs.write(tmp_path)
    return tmp_path


def test_every_role_has_specs_and_defaults() -> None:
    assert ROLES
    for role in ROLES:
        assert (role / "meta" / "argument_specs.yml").is_file(), role.name
        assert (role / "defaults" / "main.yml").is_file(), role.name
        assert "main" in specs(role), role.name


def test_the_committed_specs_and_defaults_are_what_the_catalogue_generates() -> None:
    stale = [str(p.relative_to(ROOT)) for p in rolespecs.stale(ROOT)]
    assert stale == [], f"generated from the catalogue, edited since; run `make specs`: {stale}"


def test_drift_is_seen_a_hand_edit_and_a_setting_not_generated(tmp_path: Path) -> None:
    root = copy_roles(tmp_path)
    assert rolespecs.stale(root) == []
    path = root / "roles" / "vllm_service" / "defaults" / "main.yml"
    path.write_text(path.read_text().replace("vllm_service_port: 8000", "vllm_service_port: 8001"))
    assert rolespecs.stale(root) == [path]
    assert rolespecs.write(root) == [path]
    assert rolespecs.stale(root) == []

    added = catalogue.Setting("model_cache_new_knob", "int", "A knob.", 3)
    grown = (*catalogue.CATALOGUE, added)
    assert rolespecs.stale(root, grown) == [
        root / "roles" / "model_cache" / "meta" / "argument_specs.yml",
        root / "roles" / "model_cache" / "defaults" / "main.yml"]
    rolespecs.write(root, grown)
    assert defaults(root / "roles" / "model_cache")["model_cache_new_knob"] == 3


def test_regenerating_keeps_the_roles_own_parts(tmp_path: Path) -> None:
    root = copy_roles(tmp_path)
    path = root / "roles" / "vllm_service" / "meta" / "argument_specs.yml"
    own = path.read_text().replace("Which server to start.", "Which server to start (by hand).")
    path.write_text(own)
    assert rolespecs.stale(root) == []  # outside the markers: the role's own
    assert rolespecs.render(root)[path] == own


def test_a_catalogue_setting_declared_by_hand_is_refused(tmp_path: Path) -> None:
    root = copy_roles(tmp_path)
    path = root / "roles" / "model_cache" / "defaults" / "main.yml"
    path.write_text(path.read_text().replace(
        "\n# BEGIN catalogue", "\nmodel_cache_owner: nobody\n\n# BEGIN catalogue"))
    with pytest.raises(rolespecs.SpecError, match="declares catalogue settings by hand, "
                                                  "outside the generated block: model_cache_owner"):
        rolespecs.render(root)


def test_an_entry_point_without_its_markers_is_refused(tmp_path: Path) -> None:
    root = copy_roles(tmp_path)
    path = root / "roles" / "neuron_sdk" / "meta" / "argument_specs.yml"
    text = path.read_text()
    cut = text.rindex(rolespecs.BEGIN)
    path.write_text(text[:text.rindex("\n", 0, cut)] + "\n")
    with pytest.raises(rolespecs.SpecError, match=r"no generated block in the options of "
                                                  r"entry point\(s\) check"):
        rolespecs.render(root)


def test_every_setting_has_an_owner_role_or_is_deployment_wide() -> None:
    for setting in catalogue.CATALOGUE:
        role = rolespecs.owner(setting.name, ROLE_NAMES)
        assert role in ROLE_NAMES or setting.name.startswith("prefixbench_"), setting.name
    with pytest.raises(rolespecs.SpecError, match="no role owns it"):
        rolespecs.owner("vllm_bench_x", ROLE_NAMES)


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_generated_values_read_back_as_the_catalogue_declares_them(role: Path) -> None:
    """The generator's YAML means what the catalogue says: defaults, types, choices, no_log."""
    kinds = {"str": ("str", None), "int": ("int", None), "bool": ("bool", None),
             "float": ("float", None), "dict": ("dict", None), "list_int": ("list", "int"),
             "list_float": ("list", "float"), "list_str": ("list", "str"),
             "list_dict": ("list", "dict")}
    mine = rolespecs.owned(role.name, catalogue.CATALOGUE, ROLE_NAMES)
    main = specs(role)["main"].get("options") or {}
    for setting in mine:
        opt = main[setting.name]
        assert (opt["type"], opt.get("elements")) == kinds[setting.kind], setting.name
        assert opt.get("no_log", False) is setting.secret, setting.name
        assert opt.get("choices") == (list(setting.choices) if setting.choices else None)
        assert setting.description in " ".join(opt["description"].split()), setting.name
        if setting.required:
            assert "default" not in opt and setting.name not in defaults(role)
            assert not opt.get("required"), "a profile may set it: Ansible must not require it"
        else:
            assert opt["default"] == setting.default, setting.name
            assert defaults(role)[setting.name] == setting.default, setting.name
    for entry, names in rolespecs.ENTRY_POINTS.get(role.name, {}).items():
        entry_opts = specs(role)[entry]["options"]
        for name in names:
            assert entry_opts[name] == main[name], (entry, name)


def test_catalogue_defaults_and_the_sample_values_pass_the_role_specs() -> None:
    """What preflight accepts, Ansible's role argument validation accepts too."""
    samples: dict[str, Any] = {}
    for path in sorted((ROOT / "inventories").glob("*/group_vars/all/*.yml")):
        data = yaml.load(path.read_text(), Loader=_VaultTolerantLoader) or {}  # noqa: S506
        samples |= {k: v for k, v in data.items() if not (isinstance(v, str) and "{{" in v)}
    for role in ROLES:
        for entry, spec in specs(role).items():
            opts = {name: opt for name, opt in (spec.get("options") or {}).items()
                    if name in catalogue.BY_NAME}
            given = {name: catalogue.BY_NAME[name].default for name in opts
                     if not catalogue.BY_NAME[name].required}
            for params in (given, {**given, **{k: v for k, v in samples.items() if k in opts}}):
                result = ArgumentSpecValidator(opts).validate(params)
                assert not result.error_messages, (role.name, entry, result.error_messages)


class _VaultTolerantLoader(yaml.SafeLoader):
    """Reads group_vars with an inline ``!vault`` value (left encrypted, as a string)."""


_VaultTolerantLoader.add_constructor(
    "!vault", lambda loader, node: loader.construct_scalar(node))


#: Role variables with an owned prefix that the catalogue does not declare. Preflight
#: rejects such a name in an inventory ("not a setting of this bundle"), so each is either
#: a parameter a play passes to the role, or a setting still to be catalogued.
UNCATALOGUED = {
    # Parameters the plays pass (include_role vars), never set in an inventory.
    "vllm_service_configuration", "vllm_service_settings", "vllm_service_vllm_executable",
    "vllm_service_step",
}


def test_role_variables_with_an_owned_prefix_are_catalogued() -> None:
    found = set()
    for role in ROLES:
        names = set(defaults(role)) | {name for _, name, _ in options(role)}
        found |= {n for n in settings.owned_names(names) if n not in settings.BY_NAME}
    assert found == UNCATALOGUED


def test_a_setting_type_change_shows_up_in_the_generated_spec() -> None:
    port = catalogue.BY_NAME["vllm_service_port"]
    lines = rolespecs.spec_lines(dataclasses.replace(port, kind="str", default="8000"), 6)
    assert lines[:3] == ["      vllm_service_port:", "        type: str",
                         "        default: '8000'"]
