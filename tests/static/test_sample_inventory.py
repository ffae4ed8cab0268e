"""The sample fleet's settings: one folder for both of its sources, and only what differs
from the defaults (which the settings catalogue and the model profile declare)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from prefixbench.config import recipes, settings

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "trn2_fleet"


class _Loader(yaml.SafeLoader):
    """Reads group_vars with an inline ``!vault`` value (left encrypted, as a string)."""


_Loader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))


def group_vars(folder: Path) -> dict[Path, dict[str, Any]]:
    return {path: yaml.load(path.read_text(), Loader=_Loader) or {}  # noqa: S506 - safe loader
            for path in sorted((folder / "group_vars").rglob("*.yml"))}


def test_the_ec2_inventory_reads_the_sample_fleets_group_vars() -> None:
    link = ROOT / "inventories" / "aws" / "group_vars"
    assert link.is_symlink(), "one copy of the settings: inventories/aws/group_vars is a link"
    assert link.resolve() == (SAMPLE / "group_vars").resolve()
    assert (ROOT / "inventories" / "aws" / "fleet.prefixbench_ec2.yml").is_file()
    assert (SAMPLE / "hosts.yml").is_file()
    assert (ROOT / "trn2_fleet").resolve() == SAMPLE.resolve()


def test_sample_group_vars_hold_only_what_differs_from_the_defaults() -> None:
    files = group_vars(SAMPLE)
    merged = {k: v for data in files.values() for k, v in data.items()}
    profile_name = merged.get("prefixbench_model_profile") or ""
    profile = settings.load_profile(profile_name) if profile_name else {}
    redundant = []
    for path, data in files.items():
        for name, value in data.items():
            setting = settings.BY_NAME.get(name)
            if setting is None or setting.required:
                continue
            # An inventory value wins over the profile's: equal to the default but not to
            # the profile's value, it is not redundant.
            default = profile.get(name, setting.default)
            if value == default:
                redundant.append(f"{path.relative_to(ROOT)}: {name}: {value!r}")
    assert redundant == [], "equal to the default, remove them:\n" + "\n".join(redundant)


def test_the_sample_fleet_runs_no_unpublished_layout_silently() -> None:
    # gpt-oss-120b at TP 16 on Trn2 is not AWS's (data/aws_recipes.yml): each such host
    # gets preflight's warning, with the source and the published layouts.
    merged = {k: v for data in group_vars(SAMPLE).values() for k, v in data.items()}
    inventory = yaml.safe_load((SAMPLE / "hosts.yml").read_text())
    hosts = {name: hv for group in inventory["neuron_fleet"]["children"].values()
             for name, hv in group["hosts"].items()}
    unpublished = []
    for name, host_vars in hosts.items():
        values = {**merged, **host_vars}
        result = settings.validate(values, host=name, extra_names=values.keys())
        assert result.ok, result.problems
        if recipes.matching(result.settings) is None:
            unpublished.append(name)
            (line,) = [w for w in result.warnings if "no AWS recipe" in w]
            assert "aws-neuron/aws-neuron-sdk@v2.31.1 and @v2.32.0" in line
            assert "gpt-oss-20b at TP 8 in BF16" in line
            assert "prefixbench_model_profile: gpt-oss-20b" in line
    assert unpublished == ["trn2-node-01", "trn2-node-02"]
