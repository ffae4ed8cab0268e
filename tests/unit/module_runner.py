"""Test helper: run one of the bundle's Ansible modules in-process, as Ansible would.

The module's arguments go in through ``_ANSIBLE_ARGS``; its JSON result is read from
stdout. ``module_utils`` files are made importable under ``ansible.module_utils.<name>``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_module(name: str, args: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str], *, check: bool = False,
               utils: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``library/<name>.py`` with ``args``; return its result (failed ones too)."""
    pytest.importorskip("ansible")
    from ansible.module_utils import basic  # noqa: PLC0415
    from ansible.module_utils.common import warnings  # noqa: PLC0415
    from ansible.module_utils.common.text.converters import to_bytes  # noqa: PLC0415

    monkeypatch.syspath_prepend(str(ROOT / "module_utils"))
    # Each run reports its own warnings, as each module run on a host does.
    monkeypatch.setattr(warnings, "_global_warnings", {})
    for util in utils:
        monkeypatch.setitem(sys.modules, f"ansible.module_utils.{util}",
                            importlib.import_module(util))
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps(payload)))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    spec = importlib.util.spec_from_file_location(name, ROOT / "library" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit):
        module.main()
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out
