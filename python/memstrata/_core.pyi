"""Types of the native module ``memstrata._core`` (built from ``rust/src/python``)."""

__version__: str

# --- merge (deep_merge, merge_json, strip_unsafe_keys) ---

# --- prune (prune_sliding_window) ---

# --- tokens (estimate_tokens, estimate_messages, count_tokens, fits_within) ---

# --- vectors (cosine_top_k, VectorSet) ---

# --- embed (hash_embed) ---
