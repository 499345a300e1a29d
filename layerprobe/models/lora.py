"""LoRA adapters with peft on a (shortened) model: which projections, the wrapped model, and its trainable state as
flat tensors (for an atomic resume save)."""

from __future__ import annotations

import difflib
import warnings
from typing import Any

from layerprobe.errors import ConfigError, ModelLoadError
from layerprobe.models.layers import BlockStack, projections


def lora_targets(model: Any, stack: BlockStack, wanted: tuple[str, ...]) -> list[str]:
    """Dotted paths of the projections to adapt: every attention and MLP projection of the blocks, or those whose
    own name is in `wanted` (q_proj, v_proj, ...). An unknown name is a one-line error listing the known ones."""
    found = projections(model, stack)
    if not found:
        raise ConfigError(f"{type(model).__name__}'s blocks have no linear projections to adapt: heal needs a model "
                          "whose attention and MLP are Linear layers.")
    for name in wanted:
        if name not in found:
            close = difflib.get_close_matches(name, found, n=1)
            hint = f" Did you mean: {close[0]}?" if close else ""
            raise ConfigError(f"Unknown --lora-targets '{name}': the blocks' projections are "
                              f"{', '.join(found)}.{hint}")
    return [path for name, paths in found.items() if not wanted or name in wanted for path in paths]


def with_lora(model: Any, targets: list[str], rank: int, alpha: float, seed: int) -> Any:
    """The model wrapped by peft with LoRA adapters (dropout 0, no bias) on `targets`, initialized from `seed`."""
    import torch

    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ModelLoadError("heal needs peft: pip install 'layerprobe[heal]'.") from None
    torch.manual_seed(seed)
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none", target_modules=targets,
                        task_type="CAUSAL_LM")
    with warnings.catch_warnings():  # peft asks transformers a deprecated question: not the user's concern
        warnings.simplefilter("ignore", FutureWarning)
        return get_peft_model(model, config)


def adapter_tensors(peft_model: Any) -> dict[str, Any]:
    """The adapters' weights by peft's own names (what save_pretrained writes)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}


def load_adapter_tensors(peft_model: Any, tensors: dict[str, Any]) -> None:
    from peft import set_peft_model_state_dict

    set_peft_model_state_dict(peft_model, tensors)


def trained_tensors(model: Any) -> dict[str, Any]:
    """What a healing trains, to save: a peft model's adapters, else every parameter that requires a gradient."""
    if hasattr(model, "peft_config"):
        return adapter_tensors(model)
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def load_trained_tensors(model: Any, tensors: dict[str, Any]) -> None:
    if hasattr(model, "peft_config"):
        load_adapter_tensors(model, tensors)
        return
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in tensors.items():
            params[name].copy_(value)


def optimizer_tensors(optimizer: Any) -> tuple[dict[str, Any], list]:
    """(flat tensors 'index.name', the param groups as JSON) of an optimizer's state."""
    state = optimizer.state_dict()
    flat = {f"{index}.{name}": value for index, slots in state["state"].items() for name, value in slots.items()}
    return flat, state["param_groups"]


def load_optimizer_tensors(optimizer: Any, flat: dict[str, Any], groups: list) -> None:
    state: dict[int, dict] = {}
    for key, value in flat.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": groups})
