"""Config of the in-house family: a LLaMA whose blocks take a normalization placement."""

from __future__ import annotations

import math
from typing import Any

from transformers import PretrainedConfig

from layerprobe.errors import ConfigError

from layerprobe.models.placement import PLACEMENTS, check_placements
NORM_TYPES = ("rmsnorm", "layernorm")
# Mix-LN paper, Table 7: hidden, FFN, heads, layers. `tiny` is for tests.
SIZES = {
    "tiny": dict(hidden_size=64, intermediate_size=172, num_attention_heads=4, num_hidden_layers=4),
    "llama-71m": dict(hidden_size=512, intermediate_size=1368, num_attention_heads=8, num_hidden_layers=12),
    "llama-130m": dict(hidden_size=768, intermediate_size=2048, num_attention_heads=12, num_hidden_layers=12),
    "llama-250m": dict(hidden_size=1024, intermediate_size=2560, num_attention_heads=16, num_hidden_layers=24),
    "llama-1b": dict(hidden_size=2048, intermediate_size=5461, num_attention_heads=32, num_hidden_layers=24),
    "llama-7b": dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_hidden_layers=32),
}


class ProbeLlamaConfig(PretrainedConfig):
    """LLaMA (RMSNorm, SwiGLU, RoPE, causal attention) with `norm_placement` per block."""

    model_type = "layerprobe_llama"

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 512,
        intermediate_size: int = 1368,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 8,
        max_position_embeddings: int = 1024,
        norm_placement: str = "pre",  # pre, post, mix, lns, deepnorm, sandwich
        mix_alpha: float = 0.25,  # mix: Post-LN for the first floor(alpha * L) layers
        norm_type: str = "rmsnorm",  # rmsnorm or layernorm
        norm_eps: float = 1e-6,
        rope_theta: float = 10000.0,
        initializer_range: float = 0.02,
        tie_word_embeddings: bool = False,
        use_cache: bool = False,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.norm_placement = norm_placement
        self.mix_alpha = mix_alpha
        self.norm_type = norm_type
        self.norm_eps = norm_eps
        self.rope_theta = rope_theta
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def placement(self, layer: int, num_layers: int | None = None) -> str:
        """The placement block `layer` (0-based) uses; mix resolves to post or pre."""
        if self.norm_placement != "mix":
            return self.norm_placement
        post_layers = math.floor(self.mix_alpha * (num_layers or self.num_hidden_layers))
        return "post" if layer < post_layers else "pre"


def make_config(size: str = "tiny", placement: str = "pre", **overrides: Any) -> ProbeLlamaConfig:
    """A named size (Mix-LN Table 7) with a placement; any field overridable."""
    if size not in SIZES:
        import difflib

        close = difflib.get_close_matches(size, SIZES, n=1)
        hint = f" Did you mean: {close[0]}?" if close else f" Known: {', '.join(SIZES)}."
        raise ConfigError(f"Unknown --arch '{size}'.{hint}")
    check_placements([placement])
    alpha = overrides.get("mix_alpha", 0.25)
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"--mix-alpha must be within [0, 1], got {alpha}.")
    if overrides.get("norm_type", "rmsnorm") not in NORM_TYPES:
        raise ConfigError(f"Unknown --norm-type '{overrides['norm_type']}': use rmsnorm or layernorm.")
    return ProbeLlamaConfig(**{**SIZES[size], "norm_placement": placement, **overrides})


def size_name(config: Any) -> str | None:
    """The named size (SIZES) a config was made from, by its shape; None for any other config."""
    for name, shape in SIZES.items():
        if all(getattr(config, key, None) == value for key, value in shape.items()):
            return name
    return None
