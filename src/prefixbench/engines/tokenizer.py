"""A Hugging Face tokenizer on the controller, encoding prompts as the vLLM server does.

:func:`load` reads a tokenizer from a directory (``tokenizer.json``, and
``tokenizer_config.json`` / ``chat_template.jinja`` when present) or from a
``tokenizer.json`` file, with the ``tokenizers`` package (no ``transformers``, no Hub).

:meth:`Tokenizer.encode` is what the server does to a ``/v1/completions`` prompt:
``add_special_tokens=True``, so the post-processor of ``tokenizer.json`` decides whether
a BOS (or anything else) is added. ``transformers`` can rewrite that post-processor
from ``add_bos_token`` / ``add_eos_token`` for some tokenizer classes (Llama's); this
module does not, so a ``tokenizer.json`` whose post-processor disagrees with those flags
is counted as the file says. The simulated fleet's tokenizer has no post-processor.
Padding and truncation settings of ``tokenizer.json`` are switched off at load, as
``transformers`` does for a call that asks for neither (the server's): an encoding then
depends on its text only, never on the batch it is encoded in.

:meth:`Tokenizer.encode_arrays` is the fast path for many prompts: token ids straight into
``array("I")`` (the form :mod:`prefixbench.engines.cachesim` hashes fastest). The tokenizers
library releases the GIL while it encodes a batch, so several Python threads encode in
parallel; inside :func:`serial_batches` each batch stays on its calling thread (no rayon
pool), so the number of threads is the number of cores used.

:meth:`Tokenizer.decode` is ``transformers``' (5.x) ``decode(ids)``: special tokens kept,
``clean_up_tokenization_spaces`` of ``tokenizer_config.json`` applied (default off; never
for a BPE model, as transformers 5 refuses it). :meth:`Tokenizer.roundtrip` and
:attr:`Tokenizer.base_vocab_size` are what vLLM's ``prefix_repetition`` dataset uses:
``encode(decode(ids), add_special_tokens=False)`` and ``tokenizer.vocab_size`` (the
vocabulary without added tokens, as a Hugging Face fast tokenizer counts it).

:meth:`Tokenizer.render_chat` renders a conversation as vLLM does: for gpt-oss (the model's
``config.json`` beside the tokenizer says ``model_type: gpt_oss``) in the harmony format
(:mod:`prefixbench.engines.harmony`), as vLLM ignores the chat template there; else
with the tokenizer's chat template
the way ``transformers`` ``apply_chat_template(..., add_generation_prompt=True,
tokenize=False)`` does: jinja2's ``ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True)`` with the loop-controls extension, a ``tojson`` filter that does
not HTML-escape, the ``raise_exception`` and ``strftime_now`` globals, and the special
tokens (``bos_token``, ``eos_token``, ...) of ``tokenizer_config.json`` as variables.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from array import array
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = ["Tokenizer", "TokenizerError", "load", "model_directory", "serial_batches"]

TOKENIZER_JSON: Final = "tokenizer.json"
TOKENIZER_CONFIG: Final = "tokenizer_config.json"
CHAT_TEMPLATE_FILE: Final = "chat_template.jinja"
MODEL_CONFIG: Final = "config.json"


class TokenizerError(ValueError):
    """A tokenizer cannot be loaded or used; the message names the file."""


Message = Mapping[str, str]


@dataclass
class Tokenizer:
    """A loaded tokenizer: encode prompts, render chats."""

    source: Path
    backend: Any
    config: Mapping[str, Any] = field(default_factory=dict)
    chat_template: str | None = None
    _template: Any = None
    #: The model's ``config.json`` when it sits beside the tokenizer (the model's
    #: directory, or the run's copy of its tokenizer files).
    model_config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def harmony(self) -> bool:
        """The server renders chat with harmony, not with a chat template (gpt-oss)."""
        return self.model_config.get("model_type") == "gpt_oss"

    @property
    def renders_chat(self) -> bool:
        """Chat messages can be rendered: harmony, or a chat template."""
        return self.harmony or self.chat_template is not None

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @property
    def base_vocab_size(self) -> int:
        """``tokenizer.vocab_size`` as transformers reports it for a fast tokenizer (added
        tokens not counted): the ``high`` of vLLM's ``prefix_repetition`` draws."""
        return int(self.backend.get_vocab_size(with_added_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """``transformers``' ``tokenizer.decode(ids)``: special tokens kept, spaces cleaned
        up only when the config asks for it and the model is not BPE."""
        text = str(self.backend.decode(list(ids), skip_special_tokens=False))
        if self.config.get("clean_up_tokenization_spaces") is True and not self._is_bpe():
            text = _clean_up_tokenization(text)
        return text

    def _is_bpe(self) -> bool:
        return type(self.backend.model).__name__ == "BPE"

    def encode_plain(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        return list(self._batch([text], add_special_tokens=False)[0].ids)

    def roundtrip(self, ids: Sequence[int]) -> list[int]:
        """``encode(decode(ids), add_special_tokens=False)``, one step of vLLM's
        ``gen_prompt_decode_to_target_len``."""
        return self.encode_plain(self.decode(ids))

    def encode(self, text: str) -> list[int]:
        """Token ids of a completion prompt, special tokens added as the server adds them."""
        return list(self.backend.encode(text, add_special_tokens=True).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` of many texts at once (the tokenizers library batches in Rust)."""
        return [e.ids for e in self._batch(list(texts), add_special_tokens=True)]

    def encode_arrays(self, texts: Sequence[str]) -> list[array[int]]:
        """:meth:`encode_batch` as ``array("I")`` token ids, converted once. Thread-safe;
        the encoding itself runs without the GIL."""
        return [array("I", e.ids) for e in self._batch(list(texts), add_special_tokens=True)]

    def _batch(self, texts: list[str], *, add_special_tokens: bool) -> Any:
        # encode_batch_fast (tokenizers >= 0.21) skips the offsets: same ids, less work.
        fast = getattr(self.backend, "encode_batch_fast", None)
        if fast is None:  # pragma: no cover - older tokenizers
            return self.backend.encode_batch(texts, add_special_tokens=add_special_tokens)
        return fast(texts, add_special_tokens=add_special_tokens)

    def special_tokens_added(self) -> tuple[int, int]:
        """How many tokens the server adds before and after every prompt (BOS, EOS)."""
        probe = "hello world"
        plain = list(self.backend.encode(probe, add_special_tokens=False).ids)
        full = self.encode(probe)
        for start in range(len(full) - len(plain) + 1):
            if full[start:start + len(plain)] == plain:
                return start, len(full) - start - len(plain)
        return 0, 0

    def special_tokens(self) -> dict[str, str]:
        """``bos_token``, ``eos_token``, ... of ``tokenizer_config.json`` as strings."""
        out: dict[str, str] = {}
        for key, value in self.config.items():
            if not key.endswith("_token"):
                continue
            text = value.get("content") if isinstance(value, Mapping) else value
            if isinstance(text, str):
                out[key] = text
        return out

    def render_chat(self, messages: Sequence[Message]) -> str:
        """The conversation as the prompt text, generation prompt appended: through
        harmony for gpt-oss (:mod:`prefixbench.engines.harmony`; vLLM ignores the chat
        template there), else through the chat template."""
        if self.harmony:
            from prefixbench.engines import harmony  # noqa: PLC0415 - gpt-oss only

            try:
                return harmony.render(messages)
            except harmony.HarmonyError as exc:
                raise TokenizerError(f"{self.source}: gpt-oss's chat format: {exc}") from None
        if self.chat_template is None:
            raise TokenizerError(f"{self.source}: the tokenizer has no chat template "
                                 f"(tokenizer_config.json chat_template or "
                                 f"{CHAT_TEMPLATE_FILE}), so chat messages cannot be "
                                 f"rendered; use prompt lines")
        if self._template is None:
            self._template = _compile(self.chat_template, self.source)
        context: dict[str, Any] = {**self.special_tokens()}
        context.update(messages=[dict(m) for m in messages], add_generation_prompt=True)
        try:
            return str(self._template.render(**context))
        except _TemplateRaised as exc:
            raise TokenizerError(f"{self.source}: the chat template refused the "
                                 f"conversation: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - any template error is one line
            raise TokenizerError(f"{self.source}: the chat template failed: "
                                 f"{type(exc).__name__}: {exc}") from None


_PARALLELISM_ENV: Final = "TOKENIZERS_PARALLELISM"


@contextmanager
def serial_batches() -> Iterator[None]:
    """Within this block the tokenizers library encodes every batch on the thread that
    asks (its rayon pool is not used), so ``n`` threads encoding use ``n`` cores.

    The library reads ``TOKENIZERS_PARALLELISM`` at every batch call; it is set to
    ``false`` here and restored on exit. Enter it before starting the threads that
    encode and leave it after they have finished (it changes the process environment).
    """
    old = os.environ.get(_PARALLELISM_ENV)
    os.environ[_PARALLELISM_ENV] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(_PARALLELISM_ENV, None)
        else:
            os.environ[_PARALLELISM_ENV] = old


def _clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization``."""
    for old, new in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                     (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"),
                     (" 're", "'re")):
        text = text.replace(old, new)
    return text


class _TemplateRaised(Exception):
    """``raise_exception(...)`` called by a chat template."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return dt.datetime.now().strftime(fmt)  # templates print local dates


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _compile(template: str, source: Path) -> Any:
    from jinja2 import TemplateError  # noqa: PLC0415 - only chats need jinja2
    from jinja2.ext import loopcontrols  # noqa: PLC0415
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: PLC0415

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except TemplateError as exc:
        raise TokenizerError(f"{source}: the chat template does not compile: {exc}") from None


def _chat_template(directory: Path | None, config: Mapping[str, Any]) -> str | None:
    if directory is not None and (directory / CHAT_TEMPLATE_FILE).is_file():
        return (directory / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    value = config.get("chat_template")
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # named templates: [{"name": ..., "template": ...}]
        named = {str(t.get("name")): t.get("template") for t in value
                 if isinstance(t, Mapping)}
        chosen = named.get("default")
        return chosen if isinstance(chosen, str) else None
    return None


#: Tokenizers loaded in this process, by the files they were read from and those files'
#: sizes and modification times: a report over a fleet's records loads each once.
_LOADED: dict[tuple[tuple[str, int, int], ...], Tokenizer] = {}


def _identity(path: Path) -> tuple[tuple[str, int, int], ...]:
    """Which files :func:`load` reads for ``path``, with their sizes and mtimes."""
    directory = path if path.is_dir() else path.parent
    names = [path / TOKENIZER_JSON if path.is_dir() else path]
    names += [directory / n for n in (TOKENIZER_CONFIG, CHAT_TEMPLATE_FILE, MODEL_CONFIG)]
    out = []
    for f in names:
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((str(f.resolve()), st.st_size, st.st_mtime_ns))
    return (("dir" if path.is_dir() else "file", 0, 0), *out)


def load(path: Path) -> Tokenizer:
    """The tokenizer of a directory holding ``tokenizer.json``, or of that file itself;
    loaded once per process while its files are unchanged (a 12 MB tokenizer takes about
    a second)."""
    path = Path(path)
    key = _identity(path)
    cached = _LOADED.get(key)
    if cached is None:
        cached = _LOADED[key] = _load(path)
    return cached


def _load(path: Path) -> Tokenizer:
    try:
        from tokenizers import Tokenizer as Backend  # noqa: PLC0415 - heavy, on demand
    except ImportError:  # pragma: no cover - the controller lock installs it
        raise TokenizerError("the tokenizers package is not installed "
                             "(run scripts/bootstrap)") from None
    path = Path(path)
    directory = model_directory(path)
    file = path / TOKENIZER_JSON if path.is_dir() else path
    if not file.is_file():
        raise TokenizerError(f"{file}: no such file (a tokenizer directory needs "
                             f"{TOKENIZER_JSON})")
    try:
        backend = Backend.from_file(str(file))
    except Exception as exc:  # noqa: BLE001 - the Rust error text is the reason
        raise TokenizerError(f"{file}: not a tokenizers tokenizer.json: {exc}") from None
    # transformers' fast tokenizer turns both off for a call without padding/truncation,
    # which is how the server encodes a prompt.
    backend.no_padding()
    backend.no_truncation()
    config: dict[str, Any] = {}
    if directory is not None and (directory / TOKENIZER_CONFIG).is_file():
        cfg_path = directory / TOKENIZER_CONFIG
        try:
            loaded = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"{cfg_path}: unreadable: {exc}") from None
        if not isinstance(loaded, dict):
            raise TokenizerError(f"{cfg_path}: expected a JSON object")
        config = loaded
    return Tokenizer(source=file, backend=backend, config=config,
                     chat_template=_chat_template(directory, config),
                     model_config=_model_config(directory))


def model_directory(path: Path | None) -> Path | None:
    """The directory whose files (``tokenizer_config.json``, ``chat_template.jinja``, the
    model's ``config.json``) go with a tokenizer named by ``path``: the directory itself,
    or the one holding a file named ``tokenizer.json``, so that ``DIR`` and
    ``DIR/tokenizer.json`` are the same model; ``None`` for a file of another name (a
    bare tokenizer, nothing beside it is read)."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        return path
    return path.parent if path.name == TOKENIZER_JSON else None


def _model_config(directory: Path | None) -> dict[str, Any]:
    """``config.json`` beside the tokenizer, or nothing when absent or unreadable (it only
    tells how chat is rendered and which cache model applies)."""
    if directory is None or not (directory / MODEL_CONFIG).is_file():
        return {}
    try:
        loaded = json.loads((directory / MODEL_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
