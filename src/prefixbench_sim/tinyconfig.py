"""The tiny model's shape and its Hugging Face config files.

:class:`TinyLlamaSpec` is what the simulated fleet's model is (dimensions, seed, which
tokenizer); :func:`model_config` and :func:`generation_config` are its ``config.json``
and ``generation_config.json``. The tokenizer is :mod:`prefixbench_sim.tinytokenizer`,
the weights :mod:`prefixbench_sim.tinyweights`; :mod:`prefixbench_sim.tinymodel` writes
and publishes the directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "TinyLlamaSpec",
    "generation_config",
    "model_config",
]

SPECIAL_TOKENS: Final = ("<unk>", "<s>", "</s>", "<pad>")
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3


@dataclass(frozen=True)
class TinyLlamaSpec:
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    vocab_size: int = 2048
    max_position_embeddings: int = 8192
    seed: int = 0
    init_std: float = 0.02
    #: ``"bpe"`` (byte-level BPE, the fleet's) or ``"word"`` (word-level, exact round trip).
    tokenizer: str = "bpe"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def model_config(spec: TinyLlamaSpec) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": spec.init_std,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }


def generation_config() -> dict[str, Any]:
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
