"""The tiny gpt-oss checkpoint: the tensors transformers' GptOssForCausalLM has, in bf16,
with gpt-oss's layer order and o200k_harmony's special ids."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from prefixbench_sim import tinygptoss
from prefixbench_sim.tinyweights import read_safetensors_header

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-gptoss" / \
    "state_dict_shapes.json"


def test_the_tensors_are_transformers_own_state_dict() -> None:
    recorded = json.loads(RECORDED.read_text())
    spec = tinygptoss.TinyGptOssSpec()
    assert {k: list(v) for k, v in tinygptoss.tensor_shapes(spec).items()} == \
        recorded["shapes"]
    assert spec.layer_types == recorded["layer_types"]


def test_the_written_checkpoint(tmp_path: Path) -> None:
    out = tinygptoss.write_model(tmp_path / "m")
    header = read_safetensors_header(out / "model.safetensors")
    meta = header.pop("__metadata__")
    assert meta == {"format": "pt"}
    shapes = tinygptoss.tensor_shapes(tinygptoss.TinyGptOssSpec())
    assert {k: tuple(v["shape"]) for k, v in header.items()} == shapes
    assert {v["dtype"] for v in header.values()} == {"BF16"}
    spans = sorted(v["data_offsets"] for v in header.values())
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    for name, v in header.items():
        count = 1
        for d in v["shape"]:
            count *= d
        assert v["data_offsets"][1] - v["data_offsets"][0] == 2 * count, name
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["GptOssForCausalLM"]
    assert config["layer_types"][0] == "sliding_attention" and config["sliding_window"] == 128
    assert "quantization_config" not in config
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == \
        [200002, 199999, 200012]


def test_weights_are_seeded_normal_and_norms_are_one() -> None:
    spec = tinygptoss.TinyGptOssSpec(vocab_size=1024)
    first, again = tinygptoss.weights(spec), tinygptoss.weights(spec)
    assert first == again
    other = tinygptoss.weights(tinygptoss.TinyGptOssSpec(vocab_size=1024, seed=1))
    assert other["lm_head.weight"] != first["lm_head.weight"]
    assert set(first["model.norm.weight"][1][i:i + 2] for i in range(0, 128, 2)) == \
        {b"\x80\x3f"}  # bf16 1.0
    values = _floats(first["model.embed_tokens.weight"][1])
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    assert abs(mean) < 0.002 and 0.018 < std < 0.022


def _floats(data: bytes) -> list[float]:
    import struct  # noqa: PLC0415

    return [struct.unpack("<f", b"\0\0" + data[i:i + 2])[0] for i in range(0, len(data), 2)]


@pytest.mark.parametrize(("values", "error"), [
    ({"hidden_size": 48}, "hidden_size must be a multiple of 32"),
    ({"num_hidden_layers": 3}, "num_hidden_layers must be even"),
])
def test_shapes_vllm_cannot_serve_are_refused(values: dict[str, int], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        tinygptoss.TinyGptOssSpec(**values)
