"""The hosts a Neuron host connects out to (data/egress.yml), for its settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prefixbench.config import settings
from prefixbench.hosts import egress


def hosts(**overrides: Any) -> dict[str, egress.Endpoint]:
    values = {"prefixbench_instance_type": "trn2.48xlarge",
              "prefixbench_model_profile": "gpt-oss-120b", **overrides}
    result = settings.validate(values, host="h1", extra_names=values.keys())
    assert result.ok, result.problems
    return {e.host: e for e in egress.needed(result.settings)}


def test_the_first_contact_hosts_are_listed_with_reason_and_source() -> None:
    got = hosts()
    # What the list missed before: Ubuntu's archive (EC2's regional mirror, the failsafe
    # and the security pocket), PyPI's file host, the Hub's storage, GitHub.
    for host in ("<region>.ec2.archive.ubuntu.com", "archive.ubuntu.com",
                 "security.ubuntu.com", "files.pythonhosted.org", "cdn-lfs.hf.co",
                 "cdn-lfs-us-1.hf.co", "transfer.xethub.hf.co", "cas-bridge.xethub.hf.co",
                 "*.cdn.hf.co", "github.com", "codeload.github.com"):
        assert host in got, host
    # ... and what it had.
    for host in ("apt.repos.neuron.amazonaws.com", "pip.repos.neuron.amazonaws.com",
                 "pypi.org", "huggingface.co", "openaipublic.blob.core.windows.net"):
        assert host in got, host
    assert got["security.ubuntu.com"].port == 80  # Ubuntu's archive is plain http
    assert "cloud-init" in got["<region>.ec2.archive.ubuntu.com"].source
    assert "Dockerfile.neuronx" in got["github.com"].source
    assert got["cas-bridge.xethub.hf.co"].source.startswith("observed")
    assert all(e.reason and e.source for e in egress.load())


def test_only_what_the_settings_use_is_listed() -> None:
    skipped = hosts(prefixbench_skip_provision=True)
    assert "apt.repos.neuron.amazonaws.com" not in skipped
    assert "security.ubuntu.com" not in skipped
    local = hosts(model_cache_source="local", model_cache_tiktoken=False)
    assert "huggingface.co" not in local and "cdn-lfs.hf.co" not in local
    assert "openaipublic.blob.core.windows.net" not in local
    assert not any("s3" in h for h in hosts())


def test_mirrors_and_buckets_replace_the_defaults() -> None:
    # As AWS's image: the Neuron repository is the index, PyPI the extra one.
    got = hosts(vllm_env_extra_index_urls=["https://pypi.internal.example:8443/simple"],
                vllm_env_index_url="https://neuron-pip.internal.example/simple",
                model_cache_tiktoken_base_url="https://vocab.example/encodings/",
                neuron_sdk_apt_repo_url="file:///srv/neuron-apt",
                model_cache_source="s3", model_cache_s3_uri="s3://models-bucket/gpt-oss",
                model_cache_s3_region="us-east-2")
    assert "pypi.org" not in got
    assert got["pypi.internal.example"].port == 8443
    assert got["pypi.internal.example"].source == \
        "vllm_env_extra_index_urls (instead of pypi.org)"
    assert "pip.repos.neuron.amazonaws.com" not in got
    assert "neuron-pip.internal.example" in got
    assert "vocab.example" in got
    assert "apt.repos.neuron.amazonaws.com" not in got  # a file:// mirror needs no egress
    assert "models-bucket.s3.us-east-2.amazonaws.com" in got
    assert "huggingface.co" not in got
    store = hosts(prefixbench_compile_cache_store="s3://graphs/prefixbench")
    assert "graphs.s3.<region>.amazonaws.com" in store


def test_a_bad_entry_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "egress.yml"
    bad.write_text("- {host: x.example, port: 443, when: hf, reason: r}\n")
    with pytest.raises(ValueError, match="needs host, port, when, reason and source"):
        egress.load(bad)
    bad.write_text("- {host: x.example, port: 443, when: always, reason: r, source: s}\n")
    with pytest.raises(ValueError, match="when 'always' is not one of"):
        egress.load(bad)
