"""A tiny random-weight Llama model for the simulated fleet, built without torch or the Hub:
the model directory written, the tarball published.

``vllm serve`` loads it like any Hugging Face model directory:

``config.json``
    (:mod:`prefixbench_sim.tinyconfig`) ``LlamaForCausalLM``: hidden 128, 2 layers, 4
    attention heads, 2 KV heads (GQA, head dim 32), MLP 256, vocabulary 2048, 8192
    positions, bfloat16, untied ``lm_head``.
``model.safetensors``
    (:mod:`prefixbench_sim.tinyweights`) an 8-byte little-endian header length, a JSON
    header (dtype, shape and byte offsets of each tensor, padded with spaces to 8 bytes),
    then the raw little-endian bfloat16 data. Weights are N(0, 0.02) from a seeded
    generator (norms are 1.0), so a given seed always yields the same bytes.
``tokenizer.json`` / ``tokenizer_config.json``
    (:mod:`prefixbench_sim.tinytokenizer`) ``spec.tokenizer == "bpe"`` (the default, what
    the fleet serves): a byte-level BPE like GPT-2's or gpt-oss's o200k
    (:func:`~prefixbench_sim.tinytokenizer.bpe_tokenizer_json`): ``ByteLevel``
    pre-tokenizer (GPT-2 split regex, no prefix space), BPE model, ``ByteLevel`` decoder,
    no normaliser, no post-processor (no BOS is added). It is trained with the
    ``tokenizers`` library on a corpus generated from ``spec.seed``
    (:func:`~prefixbench_sim.tinytokenizer.bpe_corpus`: pseudo-words, numbers,
    punctuation and U+FFFD), so the same spec and ``tokenizers`` version always give the
    same bytes; ids 0-3 are ``<unk> <s> </s> <pad>``, then the 256 byte symbols, then one
    id per merge, ``vocab_size`` ids in all. As with any byte-level BPE,
    ``decode(prefix + suffix)`` re-encoded as one text can merge the last prefix token
    with the first suffix characters: ``prefix_repetition`` prompts then lose a prefix
    block now and then, as they do on gpt-oss
    (:func:`prefixbench.predict.served.served_expectation` predicts by how much).

    ``spec.tokenizer == "word"``
    (:func:`~prefixbench_sim.tinytokenizer.word_level_tokenizer_json`, also
    :func:`~prefixbench_sim.tinytokenizer.tokenizer_json`): a word-level tokenizer, ids
    0-3 the special tokens, id i >= 4 the word ``t<i>``; whitespace pre-tokenizer, no
    decoder (decoding joins tokens with single spaces). Every id decodes to one word that
    encodes back to that id, so decode -> encode keeps token counts exact: tests that
    count words as tokens use it.

    ``tokenizer_config.json`` carries a ``chat_template``
    (:data:`~prefixbench_sim.tinytokenizer.CHAT_TEMPLATE`: ``t10`` user, ``t11``
    assistant, ``t12`` system, ``t13`` end of turn: vocabulary words of the word-level
    tokenizer, plain text to the BPE), so chat-messages prompt files work with either.

All files are written mode 0644 (the service user must read them). The model is
published under ``<www>/models/``: the directory ``tiny-llama/`` (with ``SHA256SUMS``),
and ``tiny-llama.tar.gz`` (reproducible) with ``tiny-llama.tar.gz.sha256``. It is rebuilt
when the code of any of these modules changes.
"""
from __future__ import annotations

import gzip
import io
import json
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixbench_sim import tinyconfig, tinytokenizer, tinyweights
from prefixbench_sim._build import (
    atomic_write,
    digest_inputs,
    log,
    replace_dir,
    sha256_file,
    source_date_epoch,
    stamp_matches,
    write_stamp,
)
from prefixbench_sim.tinyconfig import TinyLlamaSpec, generation_config, model_config
from prefixbench_sim.tinytokenizer import TOKENIZER_KINDS, model_tokenizer_json, tokenizer_config
from prefixbench_sim.tinyweights import safetensors_bytes, weights

MODEL_NAME: Final = "tiny-llama"
FILE_MODE: Final = 0o644
_LAYOUT: Final = 2
#: The code the model's bytes come from: a change to any of it rebuilds the model.
_SOURCES: Final = (__file__, tinyconfig.__file__, tinytokenizer.__file__, tinyweights.__file__)


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
        "`make tiny-model` (prefixbench_sim.tinymodel); seed "
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
    return write_files_dir(dest, model_files(spec or TinyLlamaSpec()))


def write_files_dir(dest: Path, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` and their ``SHA256SUMS`` as the directory ``dest`` (replacing it)."""
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
    inputs = {"spec": sp.__dict__, "layout": _LAYOUT,
              "source": [sha256_file(Path(str(f))) for f in _SOURCES],
              "tokenizers": _tokenizers_version(sp)}
    return publish(www, MODEL_NAME, inputs, lambda: model_files(sp))


def publish(www: Path, name: str, inputs: Mapping[str, Any],
            files: Callable[[], Mapping[str, bytes]]) -> PublishedModel:
    """Publish a model as ``<www>/models/<name>/`` (with ``SHA256SUMS``),
    ``<name>.tar.gz`` (reproducible) and its ``.sha256``; ``files`` is called only when
    ``inputs`` (with the source date epoch) changed since the last build."""
    models = www / "models"
    directory = models / name
    tarball = models / f"{name}.tar.gz"
    checksum = models / f"{name}.tar.gz.sha256"
    stamp = models / f".{name}.inputs.sha256"
    digest = digest_inputs({**inputs, "epoch": source_date_epoch()})
    if stamp_matches(stamp, digest) and tarball.is_file() and checksum.is_file():
        log(f"model {name} up to date: {directory}")
        return PublishedModel(directory, tarball, checksum.read_text().split()[0])
    models.mkdir(parents=True, exist_ok=True)
    write_files_dir(directory, files())
    data = tarball_bytes(directory, name, source_date_epoch())
    atomic_write(tarball, data, FILE_MODE)
    digest_tar = sha256_file(tarball)
    atomic_write(checksum, f"{digest_tar}  {tarball.name}\n", FILE_MODE)
    write_stamp(stamp, digest)
    log(f"model {name} written: {directory} and {tarball.name} ({len(data) / 1e6:.2f} MB)")
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
