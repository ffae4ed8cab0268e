"""A tiny random-weight Llama model for the simulated fleet, built without torch or the Hub.

``vllm serve`` loads it like any Hugging Face model directory:

``config.json``
    ``LlamaForCausalLM``: hidden 128, 2 layers, 4 attention heads, 2 KV heads (GQA, head
    dim 32), MLP 256, vocabulary 2048, 8192 positions, bfloat16, untied ``lm_head``.
``model.safetensors``
    written here: an 8-byte little-endian header length, a JSON header (dtype, shape and
    byte offsets of each tensor, padded with spaces to 8 bytes), then the raw
    little-endian bfloat16 data. Weights are N(0, 0.02) from a seeded generator (norms
    are 1.0), so a given seed always yields the same bytes.
``tokenizer.json`` / ``tokenizer_config.json``
    ``spec.tokenizer == "bpe"`` (the default, what the fleet serves): a byte-level BPE
    like GPT-2's or gpt-oss's o200k (:func:`bpe_tokenizer_json`): ``ByteLevel``
    pre-tokenizer (GPT-2 split regex, no prefix space), BPE model, ``ByteLevel`` decoder,
    no normaliser, no post-processor (no BOS is added). It is trained here with the
    ``tokenizers`` library on a corpus generated from ``spec.seed`` (:func:`bpe_corpus`:
    pseudo-words, numbers, punctuation and U+FFFD), so the same spec and ``tokenizers``
    version always give the same bytes; ids 0-3 are ``<unk> <s> </s> <pad>``, then the
    256 byte symbols, then one id per merge, ``vocab_size`` ids in all. As with any
    byte-level BPE, ``decode(prefix + suffix)`` re-encoded as one text can merge the last
    prefix token with the first suffix characters: ``prefix_repetition`` prompts then
    lose a prefix block now and then, as they do on gpt-oss
    (:func:`prefixbench.predict.served.served_expectation` predicts by how much).

    ``spec.tokenizer == "word"`` (:func:`word_level_tokenizer_json`, also
    :func:`tokenizer_json`): a word-level tokenizer, ids 0-3 the special tokens, id
    i >= 4 the word ``t<i>``; whitespace pre-tokenizer, no decoder (decoding joins tokens
    with single spaces). Every id decodes to one word that encodes back to that id, so
    decode -> encode keeps token counts exact: tests that count words as tokens use it.

    ``tokenizer_config.json`` carries a ``chat_template`` (:data:`CHAT_TEMPLATE`: ``t10``
    user, ``t11`` assistant, ``t12`` system, ``t13`` end of turn: vocabulary words of
    the word-level tokenizer, plain text to the BPE), so chat-messages prompt files work
    with either.

All files are written mode 0644 (the service user must read them). The model is
published under ``<www>/models/``: the directory ``tiny-llama/`` (with ``SHA256SUMS``),
and ``tiny-llama.tar.gz`` (reproducible) with ``tiny-llama.tar.gz.sha256``.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import struct
import tarfile
import tempfile
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixbench.sim._build import (
    atomic_write,
    digest_inputs,
    log,
    replace_dir,
    sha256_file,
    source_date_epoch,
    stamp_matches,
    write_stamp,
)

MODEL_NAME: Final = "tiny-llama"
SPECIAL_TOKENS: Final = ("<unk>", "<s>", "</s>", "<pad>")
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3
FILE_MODE: Final = 0o644
_LAYOUT: Final = 2

#: Role markers and end of turn are vocabulary words, so a rendered chat encodes to
#: known ids. Unknown roles are refused, as real templates do.
CHAT_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}t12 "
    "{% elif message['role'] == 'user' %}t10 "
    "{% elif message['role'] == 'assistant' %}t11 "
    "{% else %}{{ raise_exception('unknown role ' + message['role']) }}"
    "{% endif %}"
    "{{ message['content'] | trim }} t13 "
    "{% endfor %}"
    "{% if add_generation_prompt %}t11{% endif %}"
)


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


def word(token_id: int) -> str:
    """The word of a non-special token id."""
    return f"t{token_id}"


def vocab(spec: TinyLlamaSpec) -> dict[str, int]:
    out = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    out.update({word(i): i for i in range(len(SPECIAL_TOKENS), spec.vocab_size)})
    return out


def _added_tokens() -> list[dict[str, Any]]:
    return [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, tok in enumerate(SPECIAL_TOKENS)
    ]


def word_level_tokenizer_json(spec: TinyLlamaSpec) -> dict[str, Any]:
    """The word-level ``tokenizer.json`` (``tokenizers`` serialisation format)."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(),
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab(spec), "unk_token": "<unk>"},
    }


def tokenizer_json(spec: TinyLlamaSpec) -> dict[str, Any]:
    """The word-level ``tokenizer.json``, whatever ``spec.tokenizer`` says.

    Kept under this name for the tests and tools that count ``t<i>`` words as tokens;
    the model directory's tokenizer is :func:`model_tokenizer_json`.
    """
    return word_level_tokenizer_json(spec)


#: Pieces of the BPE training corpus's pseudo-words.
_ONSETS: Final = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r",
                  "s", "t", "v", "w", "x", "z", "br", "ch", "cl", "dr", "fl", "gr", "pl",
                  "sh", "st", "th", "tr", "wh")
_VOWELS: Final = ("a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "io", "oo", "ou")
_CODAS: Final = ("", "", "", "n", "r", "s", "t", "l", "m", "ng", "nd", "st", "ck", "x")
_PUNCT: Final = (".", ",", ";", ":", "!", "?", "-", "'", '"', "(", ")", "/", "...", "--")
#: Lines of the BPE training corpus: enough pairs for a few thousand merges.
BPE_CORPUS_LINES: Final = 4000
#: Ids before the merges: the special tokens, then the 256 byte symbols.
BPE_MIN_VOCAB: Final = len(SPECIAL_TOKENS) + 256


def bpe_corpus(seed: int, lines: int = BPE_CORPUS_LINES) -> list[str]:
    """A deterministic training corpus: lines of seeded pseudo-words (some capitalised),
    numbers, punctuation and U+FFFD.

    U+FFFD is in it so that, as in large vocabularies, the replacement character that
    decoding stray bytes produces is one token: a random id sequence then decodes and
    re-encodes to a stable length, and vLLM's length adjustment converges.
    """
    rng = random.Random(seed)  # noqa: S311 -- a reproducible corpus, not secrets

    def pseudo_word() -> str:
        syllables = rng.choice((1, 1, 2, 2, 3))
        text = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                       for _ in range(syllables))
        r = rng.random()
        if r < 0.10:
            return text.capitalize()
        if r < 0.13:
            return str(rng.randrange(10000))
        if r < 0.16:
            return "\ufffd" * rng.randint(1, 3) + (text if rng.random() < 0.5 else "")
        return text

    out: list[str] = []
    for _ in range(lines):
        words = []
        for _ in range(rng.randint(5, 20)):
            w = pseudo_word()
            if rng.random() < 0.15:
                w += rng.choice(_PUNCT)
            words.append(w)
        out.append(" ".join(words))
    return out


_BYTE_LEVEL: Final = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True}


def bpe_tokenizer_json(spec: TinyLlamaSpec) -> dict[str, Any]:
    """A byte-level BPE ``tokenizer.json`` of ``spec.vocab_size`` ids, trained on
    :func:`bpe_corpus` with the ``tokenizers`` library (needs it installed).

    Only the trained vocabulary and merges are taken from the library; the JSON around
    them is written here, so the file does not change with the library's serialiser.
    """
    if spec.vocab_size <= BPE_MIN_VOCAB:
        raise ValueError(f"a byte-level BPE needs more than {BPE_MIN_VOCAB} ids (the "
                         f"special tokens and 256 bytes), got vocab_size {spec.vocab_size}")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size, min_frequency=2, show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(bpe_corpus(spec.seed), trainer)
    trained = json.loads(tok.to_str())["model"]
    vocab_ids: dict[str, int] = trained["vocab"]
    merges = [m if isinstance(m, list) else m.split(" ", 1) for m in trained["merges"]]
    if len(vocab_ids) != spec.vocab_size or sorted(vocab_ids.values()) != list(
            range(spec.vocab_size)):
        raise ValueError(f"BPE training gave {len(vocab_ids)} ids, not {spec.vocab_size}: "
                         f"the corpus has too few distinct pairs")
    if any(vocab_ids[t] != i for i, t in enumerate(SPECIAL_TOKENS)):
        raise ValueError("BPE training did not put the special tokens at ids 0-3")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(),
        "normalizer": None,
        "pre_tokenizer": dict(_BYTE_LEVEL),
        "post_processor": None,
        "decoder": {**_BYTE_LEVEL, "add_prefix_space": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": dict(sorted(vocab_ids.items(), key=lambda kv: kv[1])),
                  "merges": [list(m) for m in merges]},
    }


TOKENIZER_KINDS: Final = ("bpe", "word")


def model_tokenizer_json(spec: TinyLlamaSpec) -> dict[str, Any]:
    """The ``tokenizer.json`` of the model directory: the kind ``spec.tokenizer`` names."""
    if spec.tokenizer == "bpe":
        return bpe_tokenizer_json(spec)
    if spec.tokenizer == "word":
        return word_level_tokenizer_json(spec)
    raise ValueError(f"unknown tokenizer kind {spec.tokenizer!r} (known: "
                     f"{', '.join(TOKENIZER_KINDS)})")


def tokenizer_config(spec: TinyLlamaSpec) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
        "add_bos_token": False, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": spec.max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }


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


# --------------------------------------------------------------------------- weights


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


# --------------------------------------------------------------------------- files


def _json(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def model_files(spec: TinyLlamaSpec) -> dict[str, bytes]:
    kind = ("byte-level BPE tokenizer (trained locally; prompt re-encoding can re-split\n"
            "token boundaries as on real models)" if spec.tokenizer == "bpe"
            else "word-level tokenizer (exact token counts)")
    readme = (
        "# tiny-llama (prefixbench simulated fleet)\n\n"
        f"Random weights, {kind}:\nfor exercising vLLM serving and prefix caching on "
        "CPU. It generates nonsense. Built by\n"
        "`scripts/build-tiny-model` (prefixbench.sim.tinymodel); seed "
        f"{spec.seed}.\n"
    )
    special = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    return {
        "README.md": readme.encode(),
        "config.json": _json(model_config(spec)).encode(),
        "generation_config.json": _json(generation_config()).encode(),
        "model.safetensors": safetensors_bytes(weights(spec)),
        "special_tokens_map.json": _json(special).encode(),
        "tokenizer.json": json.dumps(model_tokenizer_json(spec), ensure_ascii=False).encode(),
        "tokenizer_config.json": _json(tokenizer_config(spec)).encode(),
    }


def write_model_dir(dest: Path, spec: TinyLlamaSpec | None = None) -> Path:
    """Write the model directory ``dest`` (replacing it); files 0644, dirs 0755."""
    files = model_files(spec or TinyLlamaSpec())
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    for name, data in files.items():
        atomic_write(tmp / name, data, FILE_MODE)
    sums = "".join(f"{sha256_file(tmp / n)}  {n}\n" for n in sorted(files))
    atomic_write(tmp / "SHA256SUMS", sums, FILE_MODE)
    tmp.chmod(0o755)
    replace_dir(tmp, dest)
    return dest


def tarball_bytes(model_dir: Path, arcname: str, epoch: int) -> bytes:
    """A reproducible ``.tar.gz`` of ``model_dir`` under ``arcname/``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [model_dir, *sorted(model_dir.iterdir())]
        for path in entries:
            info = tar.gettarinfo(str(path), arcname if path == model_dir
                                  else f"{arcname}/{path.name}")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = epoch
            info.mode = 0o755 if path.is_dir() else FILE_MODE
            if path.is_dir():
                tar.addfile(info)
            else:
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
    return gzip.compress(buf.getvalue(), 9, mtime=0)


def _tokenizers_version(spec: TinyLlamaSpec) -> str | None:
    """The ``tokenizers`` version that trains the BPE (its merges could change with it)."""
    if spec.tokenizer != "bpe":
        return None
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version("tokenizers")
    except Exception:  # noqa: BLE001 - not installed: the build says so when it trains
        return None


@dataclass(frozen=True)
class PublishedModel:
    directory: Path
    tarball: Path
    sha256: str


def build_model(www: Path, spec: TinyLlamaSpec | None = None) -> PublishedModel:
    """Publish the tiny model under ``<www>/models/`` (a no-op when unchanged)."""
    sp = spec or TinyLlamaSpec()
    models = www / "models"
    directory = models / MODEL_NAME
    tarball = models / f"{MODEL_NAME}.tar.gz"
    checksum = models / f"{MODEL_NAME}.tar.gz.sha256"
    stamp = models / f".{MODEL_NAME}.inputs.sha256"
    digest = digest_inputs({"spec": sp.__dict__, "layout": _LAYOUT,
                            "source": sha256_file(Path(__file__)),
                            "epoch": source_date_epoch(),
                            "tokenizers": _tokenizers_version(sp)})
    if stamp_matches(stamp, digest) and tarball.is_file() and checksum.is_file():
        log(f"tiny model up to date: {directory}")
        return PublishedModel(directory, tarball, checksum.read_text().split()[0])
    models.mkdir(parents=True, exist_ok=True)
    write_model_dir(directory, sp)
    data = tarball_bytes(directory, MODEL_NAME, source_date_epoch())
    atomic_write(tarball, data, FILE_MODE)
    digest_tar = sha256_file(tarball)
    atomic_write(checksum, f"{digest_tar}  {tarball.name}\n", FILE_MODE)
    write_stamp(stamp, digest)
    log(f"tiny model written: {directory} and {tarball.name} ({len(data) / 1e6:.2f} MB)")
    return PublishedModel(directory, tarball, digest_tar)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 -- CLI only

    parser = argparse.ArgumentParser(description="Build the tiny random-weight Llama model.")
    parser.add_argument("dest", type=Path,
                        help="a directory to write the model into, or with --www the www root")
    parser.add_argument("--www", action="store_true",
                        help="publish under <dest>/models/ (directory + tarball + sha256)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", choices=TOKENIZER_KINDS, default="bpe",
                        help="byte-level BPE (default, as the fleet serves) or word-level "
                             "(exact token round trip)")
    args = parser.parse_args(argv)
    spec = TinyLlamaSpec(seed=args.seed, tokenizer=args.tokenizer)
    if args.www:
        print(build_model(args.dest.resolve(), spec).directory)
    else:
        print(write_model_dir(args.dest.resolve(), spec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
