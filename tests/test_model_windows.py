"""model_windows: the table of input windows, longest-prefix matching, user entries."""

from __future__ import annotations

import pytest

from memstrata.exceptions import InvalidInputError
from memstrata.layers import ContextGate
from memstrata.model_windows import (
    FALLBACK_MAX_INPUT_TOKENS,
    max_input_tokens_for,
    register_model_window,
    unregister_model_window,
)

WINDOWS = {
    # DeepSeek (hosted API aliases and the open weights' names)
    "deepseek-chat": 128_000,
    "deepseek-reasoner": 128_000,
    "deepseek/deepseek-chat-v3-0324": 128_000,
    "deepseek-ai/DeepSeek-R1": 128_000,
    "deepseek-r1:8b": 128_000,
    "deepseek-v3": 128_000,
    # xAI
    "grok-4": 256_000,
    "grok-4-0709": 256_000,
    "xai/grok-4-fast-reasoning": 2_000_000,
    "grok-code-fast-1": 256_000,
    "grok-3": 131_072,
    "grok-3-mini": 131_072,
    "grok-2-1212": 131_072,
    # Meta Llama, hosted names and Ollama name:tag names
    "llama3.1:8b": 131_072,
    "llama3.1": 131_072,
    "llama3.2:3b": 131_072,
    "llama3.3:70b": 131_072,
    "llama3:8b": 8_192,
    "llama2:7b": 4_096,
    "meta-llama/Llama-3.3-70B-Instruct": 131_072,
    "llama-3.2-90b-vision-preview": 131_072,
    # Qwen
    "qwen2.5:7b": 32_768,
    "qwen2.5-coder:32b": 32_768,
    "Qwen/Qwen2.5-72B-Instruct": 32_768,
    "qwen3:8b": 32_768,
    "qwen3-coder:30b": 262_144,
    "qwen-turbo": 1_000_000,
    # Mistral
    "mistral:7b": 32_768,
    "mistral-large-2411": 131_072,
    "mixtral:8x7b": 32_768,
    "devstral:24b": 131_072,
    # Google
    "gemini-1.5-pro-002": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2.0-flash-lite": 1_048_576,
    "gemini-2.5-pro": 1_048_576,
    "gemini-2.5-flash-lite": 1_048_576,
    "gemma2:9b": 8_192,
    "gemma3:12b": 131_072,
    "gemma3:1b": 32_768,
    # Anthropic
    "claude-3-opus-20240229": 200_000,
    "claude-3-5-sonnet-latest": 200_000,
    "claude-3-7-sonnet-20250219": 200_000,
    "claude-sonnet-4-20250514": 200_000,
    "claude-opus-4-1": 200_000,
    "claude-4-sonnet": 200_000,
    "anthropic/claude-haiku-4-5": 200_000,
    # OpenAI
    "gpt-4.1": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-oss:20b": 131_072,
    "openai/gpt-oss-120b": 131_072,
    # Cohere, Microsoft
    "command-r-plus": 128_000,
    "command-a-03-2025": 256_000,
    "phi4:14b": 16_384,
}


@pytest.mark.parametrize(("model", "window"), sorted(WINDOWS.items()))
def test_listed_models_resolve_to_their_window(model: str, window: int) -> None:
    assert max_input_tokens_for(model) == window


def test_a_prefix_matches_only_at_a_name_boundary() -> None:
    # "gemma3n" is another model than "gemma3", "o10" is no "o1", "grok-3x" no "grok-3".
    for name in ("gemma3n:e4b", "o10-preview", "grok-3x", "phi4x"):
        assert max_input_tokens_for(name) == FALLBACK_MAX_INPUT_TOKENS, name
    assert max_input_tokens_for("grok-4.1") == 256_000  # a later point release of a family


def test_a_user_entry_wins_and_can_be_removed() -> None:
    try:
        register_model_window("my-finetune", 32_000)
        assert max_input_tokens_for("my-finetune") == 32_000
        assert max_input_tokens_for("ollama/my-finetune:q4_K_M") == 32_000
        assert ContextGate(model="my-finetune-v2").max_input_tokens == 32_000
        # A served window smaller than the table's: the user's entry wins, even if shorter.
        register_model_window("llama3", 16_384)
        assert max_input_tokens_for("llama3.1:8b") == 16_384
        register_model_window("Llama3.1:8B", 8_000)
        assert max_input_tokens_for("llama3.1:8b") == 8_000
        assert max_input_tokens_for("llama3.1:70b") == 16_384
    finally:
        for prefix in ("my-finetune", "llama3", "llama3.1:8b"):
            unregister_model_window(prefix)
    assert max_input_tokens_for("my-finetune") == FALLBACK_MAX_INPUT_TOKENS
    assert max_input_tokens_for("llama3.1:8b") == 131_072
    unregister_model_window("never-registered")  # no error


def test_user_entries_are_checked() -> None:
    for prefix, tokens, match in [
        ("", 1000, "prefix"),
        ("   ", 1000, "prefix"),
        (3, 1000, "prefix"),
        ("m", 0, "tokens"),
        ("m", True, "tokens"),
        ("m", 1.5, "tokens"),
    ]:
        with pytest.raises(InvalidInputError, match=match):
            register_model_window(prefix, tokens)  # type: ignore[arg-type]
