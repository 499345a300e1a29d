"""Which transformers Auto class loads a model with each head layerprobe asks for."""

from __future__ import annotations

HEADS = ("base", "causal-lm", "masked-lm", "qa", "as-saved")  # as-saved: the class config.json names (export)


def auto_class(head: str, config=None):
    """transformers.AutoModel* for `head` (one of HEADS); with the config, a language-model head of an
    encoder-decoder (T5, BART) or of a vision-language model (LLaVA, Qwen2-VL) is that family's own."""
    import transformers

    if head == "as-saved":  # the checkpoint's own class with every head it has (a classifier, an untied LM head)
        names = getattr(config, "architectures", None) or []
        found = getattr(transformers, names[0], None) if names else None
        return found if found is not None else transformers.AutoModel
    if head == "causal-lm" and config is not None:
        if getattr(config, "is_encoder_decoder", False):
            return transformers.AutoModelForSeq2SeqLM
        if getattr(config, "vision_config", None) is not None:
            return transformers.AutoModelForImageTextToText
    return {
        "base": transformers.AutoModel,
        "causal-lm": transformers.AutoModelForCausalLM,
        "masked-lm": transformers.AutoModelForMaskedLM,
        "qa": transformers.AutoModelForQuestionAnswering,
    }[head]
