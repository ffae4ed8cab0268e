"""The Hub commit of a model directory (module_utils/prefixbench_hf.py).

There is no Hub here: the metadata files are written by huggingface_hub's own
``write_download_metadata`` (what ``hf download --local-dir`` calls for every file),
so the reader is tested against the real format.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "module_utils"))

import prefixbench_hf as hf  # noqa: E402

local_folder = pytest.importorskip("huggingface_hub._local_folder")

COMMIT = "a" * 39 + "1"
OTHER = "b" * 40
REPO = "openai/gpt-oss-20b"


def download(local_dir: Path, commit: str, files: dict[str, bytes]) -> None:
    """What ``hf download --local-dir`` leaves: the files and one metadata file each."""
    for rel, data in files.items():
        (local_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (local_dir / rel).write_bytes(data)
        local_folder.write_download_metadata(local_dir, rel, commit, f"etag-{rel}")


FILES = {"config.json": b"{}\n", "model-00001-of-00003.safetensors": b"x" * 10,
         "original/dtypes.json": b"{}\n"}


def test_commit_is_read_from_the_download_metadata(tmp_path: Path) -> None:
    download(tmp_path, COMMIT, FILES)
    assert set(hf.read_metadata(tmp_path)) == {f"{r}.metadata" for r in FILES}
    found = hf.inspect(tmp_path, REPO, "main")
    assert found["commit"] == COMMIT and found["problem"] == ""
    assert found["record"] is None and found["current"] is False


def test_record_is_current_only_for_the_same_request_and_commit(tmp_path: Path) -> None:
    download(tmp_path, COMMIT, FILES)
    record = {"source": "hf", "repo_id": REPO, "requested_revision": "main",
              "revision": COMMIT}
    (tmp_path / hf.RECORD_NAME).write_text(json.dumps(record))
    assert hf.inspect(tmp_path, REPO, "main")["current"] is True
    assert hf.inspect(tmp_path, REPO, "v2")["current"] is False
    assert hf.inspect(tmp_path, "openai/gpt-oss-120b", "main")["current"] is False
    # The record of the old role (requested revision as the revision) is not current.
    (tmp_path / hf.RECORD_NAME).write_text(json.dumps(
        {"source": "hf", "repo_id": REPO, "revision": "main"}))
    assert hf.inspect(tmp_path, REPO, "main")["current"] is False


def test_mixed_commits_are_refused(tmp_path: Path) -> None:
    download(tmp_path, COMMIT, FILES)
    download(tmp_path, OTHER, {"config.json": b"{}\n"})
    found = hf.inspect(tmp_path, REPO, "main")
    assert found["commit"] is None
    assert "files of more than one commit" in found["problem"]


def test_a_pinned_commit_must_match(tmp_path: Path) -> None:
    download(tmp_path, COMMIT, FILES)
    assert hf.inspect(tmp_path, REPO, COMMIT)["commit"] == COMMIT
    found = hf.inspect(tmp_path, REPO, OTHER)
    assert found["commit"] is None and "not the requested" in found["problem"]


def test_nothing_downloaded(tmp_path: Path) -> None:
    found = hf.inspect(tmp_path / "missing", REPO, "main")
    assert found == {"commit": None, "record": None, "current": False,
                     "problem": found["problem"]}
    assert "no Hub download metadata" in found["problem"]


def test_commit_of_metadata_checks_the_first_line() -> None:
    assert hf.commit_of_metadata({"a.metadata": f"{COMMIT}\netag\n1.0\n"}) == COMMIT
    with pytest.raises(hf.RevisionError, match="is not a commit id"):
        hf.commit_of_metadata({"a.metadata": "main\netag\n"})
    with pytest.raises(hf.RevisionError, match="is not a commit id"):
        hf.commit_of_metadata({"a.metadata": ""})


def _tasks(node: Any) -> Iterator[dict[str, Any]]:
    """Every task of a task list, blocks opened (block, rescue, always)."""
    for task in node or []:
        yield task
        for part in ("block", "rescue", "always"):
            yield from _tasks(task.get(part))


def test_no_secret_is_ever_in_a_task_environment_or_an_unguarded_task() -> None:
    """Ansible prefixes a task's ``environment:`` to the remote command, and -vvv prints
    that command even under no_log: no secret may go there. A task that passes a secret
    as an argument must be no_log, or hand it to a module whose spec marks it no_log;
    conditions (when, that) are evaluated, never printed."""
    import yaml  # noqa: PLC0415

    from prefixbench.config import settings  # noqa: PLC0415

    secret = re.compile(r"(?<![.\w])(" + "|".join(sorted(settings.SECRETS)) + r")\b")
    no_log_modules = ("prefixbench_s3_sync", "prefixbench_compile_cache")
    users = []
    for path in sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/**/*.yml")]):
        data = yaml.safe_load(path.read_text())
        if not isinstance(data, list) or (data and "hosts" in data[0]):
            data = [t for play in data or [] for t in play.get("tasks", [])]
        for task in _tasks(data):
            name = f"{path.relative_to(ROOT)}: {task.get('name')}"
            assert not secret.search(json.dumps(task.get("environment", {}))), name
            args = {k: v for k, v in task.items()
                    if k not in ("when", "that", "name", "block", "rescue", "always")}
            if isinstance(task.get("ansible.builtin.assert"), dict):
                args.pop("ansible.builtin.assert")
            if secret.search(json.dumps(args)):
                users.append(name)
                assert task.get("no_log") is True or any(m in task for m in no_log_modules), \
                    name
    # The places that hold a secret: the Hub token file, the units' environment file,
    # the S3 sync's arguments, the S3 compile store's.
    assert any("hf.yml: Put the Hub token there" in u for u in users), users
    assert any("vllm_service/tasks/main.yml: Write the servers' private" in u
               for u in users), users
    assert any("s3.yml" in u for u in users), users
    assert any("compile_restore.yml" in u for u in users), users


@pytest.mark.parametrize("module", ["prefixbench_s3_sync", "prefixbench_compile_cache"])
def test_the_s3_keys_are_no_log_in_the_module_spec(module: str) -> None:
    spec = (ROOT / f"library/{module}.py").read_text()
    assert '"access_key_id": {"type": "str", "default": "", "no_log": True}' in spec
    assert '"secret_access_key": {"type": "str", "default": "", "no_log": True}' in spec
