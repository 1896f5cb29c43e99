"""Input windows of common models, for the context gate when ``max_input_tokens`` is not given.

The table maps a model-name prefix to the number of prompt tokens the model accepts, from each
vendor's model documentation (input window, not the output limit; where a vendor states a
separate input cap, that cap). Names are matched by the longest prefix after lowercasing and
dropping routing prefixes (``openrouter/anthropic/claude-haiku-4-5`` -> ``claude-haiku-4-5``,
``anthropic.claude-3-5-sonnet-...`` on Bedrock -> ``claude-3-5-sonnet-...``).

Self-hosted open-weight models (Llama, Mistral, Qwen) get the window of the published weights'
configuration; a server started with a smaller ``--max-model-len`` accepts less, so pass
``max_input_tokens`` explicitly there. Unknown models get :data:`FALLBACK_MAX_INPUT_TOKENS`,
deliberately small: refusing early is recoverable, a provider's 400 mid-task is not.
"""

from __future__ import annotations

FALLBACK_MAX_INPUT_TOKENS = 8192

MODEL_INPUT_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-5": 272_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1-mini": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    # Anthropic
    "claude-2": 100_000,
    "claude-3": 200_000,
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
    # Meta Llama
    "llama-2": 4_096,
    "llama-3": 8_192,
    "llama-3.1": 131_072,
    "llama-3.2": 131_072,
    "llama-3.3": 131_072,
    "meta-llama-3": 8_192,
    "meta-llama-3.1": 131_072,
    # Mistral
    "mistral-large": 131_072,
    "mistral-medium": 131_072,
    "mistral-small": 32_768,
    "mistral-7b": 32_768,
    "mistral-tiny": 32_768,
    "open-mistral-nemo": 131_072,
    "mistral-nemo": 131_072,
    "ministral": 131_072,
    "codestral": 256_000,
    "pixtral": 131_072,
    "mixtral-8x7b": 32_768,
    "open-mixtral-8x7b": 32_768,
    "mixtral-8x22b": 65_536,
    "open-mixtral-8x22b": 65_536,
    # Qwen (Alibaba): hosted API models, then open weights at their native window
    "qwen-turbo": 1_000_000,
    "qwen-plus": 131_072,
    "qwen-max": 32_768,
    "qwen2.5": 32_768,
    "qwen2": 32_768,
    "qwen3": 32_768,
}


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
    """The input window of ``model`` by longest table prefix, else ``fallback``."""
    if not model:
        return fallback
    name = normalize_model_name(model)
    best = ""
    for prefix in MODEL_INPUT_WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return MODEL_INPUT_WINDOWS[best] if best else fallback
