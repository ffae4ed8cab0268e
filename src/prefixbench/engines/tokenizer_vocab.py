"""The tiktoken vocabulary files a model's chat encoding reads, and their published sha256.

gpt-oss renders its chat format with openai-harmony, which loads ``o200k_base.tiktoken``
when vLLM's API server starts (vllm 0.21 ``vllm/entrypoints/openai/parser/harmony_utils.py``).
Without ``TIKTOKEN_ENCODINGS_BASE`` harmony downloads it from
:data:`DEFAULT_BASE_URL`; with it, harmony reads ``<dir>/o200k_base.tiktoken`` and checks
the file's sha256 itself. The model_cache role downloads the files listed in
``model_cache_tiktoken_files`` into ``model_cache_tiktoken_dir`` and verifies them
against :func:`expected_sha256`, so a server never needs the internet at start-up.

Sources (the same hashes in both places):

- openai/harmony tag v0.0.8 (ec7606df) ``src/tiktoken_ext/public_encodings.rs``:
  ``DEFAULT_TIKTOKEN_BASE_URL``, ``TIKTOKEN_ENCODINGS_BASE``, ``vocab_file_name`` and
  ``expected_hash``.
- openai/tiktoken@4e71bbe0 ``tiktoken_ext/openai_public.py`` (o200k_base, cl100k_base).
- vllm-project/recipes@8959cf64 ``OpenAI/GPT-OSS.md`` (the offline workaround: download both files,
  export ``TIKTOKEN_ENCODINGS_BASE``).

Pure; imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType
from typing import Final

#: Where harmony (and Python tiktoken) download the vocabularies from.
DEFAULT_BASE_URL: Final = "https://openaipublic.blob.core.windows.net/encodings/"

#: File name -> published sha256. gpt-oss needs only o200k_base (harmony's
#: ``O200kHarmony`` encoding); cl100k_base is listed because vLLM's recipe ships it too.
SHA256: Final = MappingProxyType({
    "o200k_base.tiktoken":
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base.tiktoken":
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
})


class UnknownVocabFile(ValueError):
    """A vocabulary file whose published sha256 this module does not know."""


def known_files() -> list[str]:
    return sorted(SHA256)


def expected_sha256(files: Iterable[str]) -> dict[str, str]:
    """``{file: sha256}`` for ``files``; :class:`UnknownVocabFile` names any unknown one."""
    wanted = list(files)
    unknown = [f for f in wanted if f not in SHA256]
    if unknown:
        raise UnknownVocabFile(
            f"no published sha256 for {', '.join(unknown)} (known: {', '.join(known_files())})")
    return {f: SHA256[f] for f in wanted}


def download_url(base_url: str, file: str) -> str:
    """The URL of ``file`` under ``base_url`` (with or without a trailing slash)."""
    return f"{base_url.rstrip('/')}/{file}"
