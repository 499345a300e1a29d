"""Which transformers Auto class loads a model with each head layerprobe asks for."""

from __future__ import annotations

HEADS = ("base", "causal-lm", "masked-lm", "qa")


def auto_class(head: str):
    """transformers.AutoModel* for `head` (one of HEADS)."""
    import transformers

    return {
        "base": transformers.AutoModel,
        "causal-lm": transformers.AutoModelForCausalLM,
        "masked-lm": transformers.AutoModelForMaskedLM,
        "qa": transformers.AutoModelForQuestionAnswering,
    }[head]
