"""Every setting the docs name exists in the settings catalogue (and so is validated by
preflight): a renamed or removed variable cannot survive in README, RUNBOOK, docs/ or a
role's README."""

from __future__ import annotations

import re
from pathlib import Path

from prefixbench.config import settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "RUNBOOK.md", *sorted((ROOT / "roles").glob("*/README.md")),
        *sorted((ROOT / "docs").glob("*.md"))]
NAME = re.compile(r"\b((?:prefixbench|neuron_sdk|vllm_env|model_cache|vllm_service)_[a-z0-9_]+)\b")

#: Names with an owned prefix that are not settings: the bundle's modules and plugins,
#: and what roles publish or pass to each other.
NOT_SETTINGS = {
    *(p.stem for d in ("library", "module_utils", "plugins/action", "plugins/inventory",
                       "plugins/vars")
      for p in (ROOT / d).glob("*.py")),
    # the development tools' packages beside the product (prefixbench_sim, _perf)
    *(p.parent.name for p in (ROOT / "src").glob("*/__init__.py")),
    # the filters (docs/architecture.md names those a run goes through)
    *re.findall(r'^\s*"(prefixbench_[a-z0-9_]+)":',
                (ROOT / "plugins" / "filter" / "prefixbench.py").read_text(encoding="utf-8"),
                re.M),
    "vllm_env_executable",     # the fact the vllm_env role publishes
    "vllm_service_settings",   # a sweep point's settings, handed to vllm_service
    "vllm_env_platform_check_later",  # the provision phase tells vllm_env to not wait
    "vllm_service_step",  # prefix_bench tells vllm_service's start to launch or to wait
}


def test_every_variable_the_docs_name_is_a_catalogued_setting() -> None:
    unknown = {}
    for doc in DOCS:
        for match in NAME.finditer(doc.read_text(encoding="utf-8")):
            name = match.group(1)
            if name not in settings.BY_NAME and name not in settings.RESERVED \
                    and name not in NOT_SETTINGS:
                unknown.setdefault(name, set()).add(doc.relative_to(ROOT).as_posix())
    assert unknown == {}, unknown
