"""Input windows of common models, for the context gate when ``max_input_tokens`` is not given.

The table maps a model-name prefix to the number of prompt tokens the model accepts, from each
vendor's model documentation (input window, not the output limit; where a vendor states a
separate input cap, that cap). Names are lowercased and routing prefixes dropped
(``openrouter/anthropic/claude-haiku-4-5`` -> ``claude-haiku-4-5``,
``anthropic.claude-3-5-sonnet-...`` on Bedrock -> ``claude-3-5-sonnet-...``), then matched by
the longest prefix that ends at a name boundary: the end of the name, or a ``-``, ``_``,
``.``, ``:``, ``@`` or space after it. So Ollama's ``name:tag`` names (``llama3.1:8b``) find
their family (``llama3.1``), a dated or sized variant (``grok-4-0709``) finds its model, and
``gemma3n`` is not taken for ``gemma3``.

Your own entries come first: :func:`register_model_window` adds one (a fine-tune, a model the
table lacks, or a server's smaller window), and any of them that matches wins over the
table, whatever its length; among them the longest wins too.

Self-hosted open-weight models (Llama, Mistral, Qwen, Gemma, DeepSeek) get the window of the
published weights' configuration; a server started with a smaller window accepts less (vLLM's
``--max-model-len``; Ollama's ``num_ctx``, which defaults to a few thousand tokens and cuts the
prompt silently past it), so register the served window or pass ``max_input_tokens``
explicitly there. Unknown models get :data:`FALLBACK_MAX_INPUT_TOKENS`, deliberately small:
refusing early is recoverable, a provider's 400 mid-task is not.
"""

from __future__ import annotations

import threading

from memstrata.exceptions import InvalidInputError

FALLBACK_MAX_INPUT_TOKENS = 8192

MODEL_INPUT_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-5": 272_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-oss": 131_072,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "codex-mini": 200_000,
    # Anthropic
    "claude-2": 100_000,
    "claude-3": 200_000,
    "claude-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-opus-4": 200_000,
    "claude-haiku-4": 200_000,
    # Google
    "gemini-1.0-pro": 30_720,
    "gemini-pro": 30_720,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2.0-flash": 1_048_576,
    "gemini-2.5-pro": 1_048_576,
    "gemini-2.5-flash": 1_048_576,
    "gemma": 8_192,
    "gemma2": 8_192,
    "gemma-2": 8_192,
    "gemma3": 131_072,
    "gemma-3": 131_072,
    "gemma3:1b": 32_768,
    "gemma-3-1b": 32_768,
    # xAI
    "grok-2": 131_072,
    "grok-3": 131_072,
    "grok-4": 256_000,
    "grok-4-fast": 2_000_000,
    "grok-code-fast": 256_000,
    # DeepSeek: the API's deepseek-chat (V3 line) and deepseek-reasoner (R1 line) at the 128K
    # the API documents since V3.1 (64K before); the open weights' names likewise.
    "deepseek-chat": 128_000,
    "deepseek-reasoner": 128_000,
    "deepseek-v3": 128_000,
    "deepseek-r1": 128_000,
    # Meta Llama (hosted names, Hugging Face names and Ollama's)
    "llama-2": 4_096,
    "llama2": 4_096,
    "llama-3": 8_192,
    "llama3": 8_192,
    "llama-3.1": 131_072,
    "llama-3.2": 131_072,
    "llama-3.3": 131_072,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "meta-llama-3": 8_192,
    "meta-llama-3.1": 131_072,
    "codellama": 16_384,
    # Mistral
    "mistral": 32_768,
    "mistral-large": 131_072,
    "mistral-medium": 131_072,
    "mistral-small": 32_768,
    "mistral-7b": 32_768,
    "mistral-tiny": 32_768,
    "open-mistral-nemo": 131_072,
    "mistral-nemo": 131_072,
    "ministral": 131_072,
    "codestral": 256_000,
    "devstral": 131_072,
    "pixtral": 131_072,
    "mixtral": 32_768,
    "mixtral-8x7b": 32_768,
    "open-mixtral-8x7b": 32_768,
    "mixtral-8x22b": 65_536,
    "mixtral:8x22b": 65_536,
    "open-mixtral-8x22b": 65_536,
    # Qwen (Alibaba): hosted API models, then open weights at their native window
    "qwen-turbo": 1_000_000,
    "qwen-plus": 131_072,
    "qwen-max": 32_768,
    "qwen2.5": 32_768,
    "qwen2": 32_768,
    "qwen3": 32_768,
    "qwen3-coder": 262_144,
    # Cohere, Microsoft
    "command-r": 128_000,
    "command-a": 256_000,
    "phi4": 16_384,
    "phi-4": 16_384,
}

# Separators after which a longer name still belongs to the prefix's model.
_BOUNDARY = frozenset("-_.:@ ")

_user_windows: dict[str, int] = {}
_user_lock = threading.Lock()


def register_model_window(prefix: str, tokens: int) -> None:
    """Adds (or replaces) your own entry: models whose name starts with ``prefix`` (at a name
    boundary, after the same normalization as the lookup) accept ``tokens`` prompt tokens.
    Your entries are consulted before the built-in table, in this process, by every
    :class:`~memstrata.layers.ContextGate` built afterwards.

    Example::

        register_model_window("llama3.1:8b", 16_384)  # the num_ctx the Ollama server runs with
        register_model_window("acme-coder", 64_000)

    Raises:
        InvalidInputError: ``prefix`` is not a non-empty string, or ``tokens`` is not a
            positive int.
    """
    if not isinstance(prefix, str) or not normalize_model_name(prefix):
        raise InvalidInputError(f"prefix must be a non-empty model name, got {prefix!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise InvalidInputError(f"tokens must be a positive int, got {tokens!r}")
    with _user_lock:
        _user_windows[normalize_model_name(prefix)] = tokens


def unregister_model_window(prefix: str) -> None:
    """Removes your entry for ``prefix`` (nothing happens when there is none)."""
    if isinstance(prefix, str):
        with _user_lock:
            _user_windows.pop(normalize_model_name(prefix), None)


def normalize_model_name(model: str) -> str:
    """Lowercased, routing prefixes dropped: the part after the last ``/`` and, for Bedrock
    style ``vendor.model`` names, after the vendor."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    vendor, dot, rest = name.partition(".")
    if dot and vendor in {"anthropic", "meta", "mistral", "amazon", "cohere", "us", "eu"}:
        name = rest
        vendor, dot, rest = name.partition(".")
        if dot and vendor in {"anthropic", "meta", "mistral"}:
            name = rest
    return name


def max_input_tokens_for(model: str | None, *, fallback: int = FALLBACK_MAX_INPUT_TOKENS) -> int:
    """The input window of ``model``: your entries' longest matching prefix, else the table's,
    else ``fallback``."""
    if not model:
        return fallback
    name = normalize_model_name(model)
    with _user_lock:
        mine = _longest(name, _user_windows)
    if mine is not None:
        return mine
    found = _longest(name, MODEL_INPUT_WINDOWS)
    return found if found is not None else fallback


def _longest(name: str, table: dict[str, int]) -> int | None:
    best = ""
    for prefix in table:
        if (
            len(prefix) > len(best)
            and name.startswith(prefix)
            and (len(name) == len(prefix) or name[len(prefix)] in _BOUNDARY)
        ):
            best = prefix
    return table[best] if best else None
