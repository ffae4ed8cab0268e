"""The tiny model's weights: N(0, 0.02) from a seeded generator (norms 1.0), as bfloat16
in a ``model.safetensors`` written without torch.

The file is an 8-byte little-endian header length, a JSON header (dtype, shape and byte
offsets of each tensor, padded with spaces to 8 bytes), then the raw little-endian
bfloat16 data; a given seed always yields the same bytes.
"""

from __future__ import annotations

import json
import random
import struct
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefixbench_sim.tinyconfig import TinyLlamaSpec

__all__ = ["read_safetensors_header", "safetensors_bytes", "tensor_shapes", "to_bf16",
           "weights"]


def tensor_shapes(spec: TinyLlamaSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor of the Llama checkpoint, by its Hugging Face name."""
    h, i, v = spec.hidden_size, spec.intermediate_size, spec.vocab_size
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
            f"{p}.self_attn.q_proj.weight": (spec.num_attention_heads * spec.head_dim, h),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.o_proj.weight": (h, spec.num_attention_heads * spec.head_dim),
            f"{p}.mlp.gate_proj.weight": (i, h),
            f"{p}.mlp.up_proj.weight": (i, h),
            f"{p}.mlp.down_proj.weight": (h, i),
        }
    return dict(sorted(shapes.items()))


def to_bf16(values: Sequence[float]) -> bytes:
    """Little-endian bfloat16 bytes of ``values`` (round to nearest even)."""
    bits = array("I")
    bits.frombytes(array("f", values).tobytes())
    out = array("H", (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF for b in bits))
    if out.itemsize != 2 or struct.pack("=H", 1) != b"\x01\x00":
        out.byteswap()  # big-endian machine: safetensors is little-endian
    return out.tobytes()


def weights(spec: TinyLlamaSpec) -> dict[str, tuple[tuple[int, ...], bytes]]:
    rng = random.Random(spec.seed)  # noqa: S311 -- reproducible weights, not secrets
    out: dict[str, tuple[tuple[int, ...], bytes]] = {}
    for name, shape in tensor_shapes(spec).items():
        count = 1
        for d in shape:
            count *= d
        if name.endswith("norm.weight"):
            values: list[float] = [1.0] * count
        else:
            values = [rng.gauss(0.0, spec.init_std) for _ in range(count)]
        out[name] = (shape, to_bf16(values))
    return out


def safetensors_bytes(tensors: Mapping[str, tuple[tuple[int, ...], bytes]],
                      dtype: str = "BF16", metadata: Mapping[str, str] | None = None) -> bytes:
    """Serialise ``{name: (shape, raw little-endian bytes)}`` in the safetensors format."""
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, (shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(d for _, d in tensors.values())


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (for checks and tests)."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, Any] = json.loads(handle.read(length))
    return header
