"""The bucket flags of ``prefixbench whatif`` and ``chat-traffic``
(``--num-batched-tokens-buckets``, ``--kv-segment-size-buckets``): a server's own
neuron_config buckets, refused in one line where preflight refuses the same settings."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from prefixbench.engines.schedconfig import Serving
from prefixbench.frontend import cli, whatif_setup


def run(command: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([command, *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("argv", "message"), [
    # the settings are the Neuron plugin's
    (["--platform", "cpu", "--num-batched-tokens-buckets", "1024"],
     "--num-batched-tokens-buckets applies with --platform neuron only"),
    # vllm_neuron/utils/bucket_utils.py resolve_segmented_prefill_config: without
    # kv_segment_size_buckets, below max_model_len, the buckets are [max_num_batched_tokens]
    (["--num-batched-tokens-buckets", "512,1024"],
     "num_batched_tokens_buckets [512, 1024] must be [1024]"),
    # prefix-caching.md / reference-configuration.md: a single segment size ...
    (["--kv-segment-size-buckets", "1024,2048", "--max-num-batched-tokens", "2048"],
     "--kv-segment-size-buckets [1024, 2048] has 2 sizes"),
    # ... identical to num_batched_tokens_buckets ...
    (["--kv-segment-size-buckets", "1024", "--num-batched-tokens-buckets", "512,1024"],
     "--kv-segment-size-buckets [1024] must equal --num-batched-tokens-buckets [512, 1024]"),
    # ... and the prefill segment, max_num_batched_tokens
    (["--kv-segment-size-buckets", "2048"],
     "--max-num-batched-tokens 1024 must match the prefill segment"),
    # a size no known release supports (prefix_caching.segment_sizes: 512 to 4096)
    (["--kv-segment-size-buckets", "3072", "--max-num-batched-tokens", "3072"],
     "--kv-segment-size-buckets [3072] not supported on any known Neuron release"),
    # buckets must end at min(max_num_batched_tokens, max_model_len)
    (["--kv-segment-size-buckets", "1024", "--num-batched-tokens-buckets", "1024",
      "--max-num-batched-tokens", "2048", "--max-model-len", "8192"],
     "--num-batched-tokens-buckets: num_batched_tokens_buckets [1024] must be ascending "
     "and end at min(max_num_batched_tokens, max_model_len) = 2048"),
])
@pytest.mark.parametrize("command", ["whatif", "chat-traffic"])
def test_bucket_flags_a_server_would_refuse_are_refused_in_one_line(
        command: str, argv: list[str], message: str, tmp_path: Path) -> None:
    first = (["--workload", "high_overlap"] if command == "whatif"
             else [str(tmp_path / "chat.jsonl")])
    code, out, err = run(command, *first, *argv)
    assert code == 2, (out, err)
    assert err.startswith(f"prefixbench {command}: error: ") and message in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "chat.jsonl").exists()


def test_a_list_that_is_not_sizes_is_refused_by_the_parser(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run("whatif", "--workload", "high_overlap",
                     "--num-batched-tokens-buckets", "1024,x")
    assert code == 2
    assert "'1024,x' is not a comma-separated list of integers" in capsys.readouterr().err


def test_configured_buckets_are_the_ones_the_prediction_pads_to() -> None:
    code, out, err = run("whatif", "--workload", "high_overlap", "--kv-segment-size-buckets",
                         "2048", "--num-batched-tokens-buckets", "2048",
                         "--max-num-batched-tokens", "2048")
    assert (code, err) == (0, "")
    assert "  prefill segment:        2048 tokens [given: --kv-segment-size-buckets]" in out
    assert "  prefill buckets:        [2048] (every chunk padded to one) [given: " \
           "--num-batched-tokens-buckets]" in out
    # a 3072 + 1024 prompt in chunks of 2048: a cold one runs 2, a warm one 1 (its 3072-
    # token hit is block-aligned, so its next chunk starts at 3072: ceil(1024 / 2048))
    assert "chunks of 2048 tokens padded to buckets [2048]" in out
    assert "45 of 100 prefill chunks" in out


def test_a_configured_segment_sets_the_buckets_where_the_plugin_would_not() -> None:
    # max_num_batched_tokens not below max_model_len: no automatic segmented prefill, the
    # default buckets would be powers of two from 128 ("Bucket Configuration"); with
    # kv_segment_size_buckets set, the model runner pads to them (resolve_prefill_buckets,
    # vllm_neuron/utils/bucket_utils.py resolve_segmented_prefill_config)
    serving, assumed = whatif_setup._segment(
        Serving(max_num_batched_tokens=2048, max_model_len=2048), 32,
        {"kv_segment_size_buckets": [2048]})
    assert serving.prefill_buckets == (2048,) and serving.prefill_segment == 2048
    assert any(a.name == "prefill buckets" and "the model runner sets" in a.source
               for a in assumed)
