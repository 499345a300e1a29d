"""A fold is verified, not assumed (issue 47): after the maps are folded, the merged model's logits on held-out
positions are compared with the fitted model's, the one the fits describe: the unpruned weights without the removed
blocks, each run's replacement applied by a hook, the output of the block before the run becoming out - m + m T
(m: what that block adds through its MLP projection, models/layers.py output_scale). Both run the same kept blocks,
so they agree to float noise exactly when folding T into the projection applies m T and nothing else; an
architecture whose block rescales or normalizes the MLP output after the projection in a way layerprobe does not
know differs, and the fold is refused with the architecture named, before anything is written as repaired."""

from __future__ import annotations

from typing import Any

from layerprobe.errors import ArchitectureError
from layerprobe.hook_owner import owned_hooks
from layerprobe.hooks import block_hidden
from layerprobe.models.layers import BlockStack, find_blocks, fold_target, output_scale, text_config
from layerprobe.models.replacement import contiguous_runs
from layerprobe.models.surgery import removed_layers

# The largest difference in logits, relative to the largest logit, that is float noise of the fold (the folded weight
# rounded to its dtype once); beyond it the fold is not what was fitted. On tiny random float32 models (tests/
# test_fold_verified.py) an exact fold gives 1e-7 to 5e-7, Granite's residual_multiplier left unfolded 0.14, a
# Post-LN OPT folded as if Pre-LN 4e-5.
FOLD_NOISE = {"float64": 1e-10, "float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


def _replacing(T: Any, scale: float) -> tuple[Any, Any]:
    """(projection hook, block hook): the first keeps m, the second turns the block's output into out - m + m T."""
    import torch

    seen: dict = {}

    def on_projection(module, args, output):
        seen["m"] = output * scale

    def on_block(module, args, output):
        hidden = block_hidden(output)
        m = seen.pop("m").reshape(hidden.shape)  # (batch, seq, d); OPT projects flattened (batch * seq, d)
        made = hidden - m + (m.double() @ T.to(device=m.device, dtype=torch.float64)).to(hidden.dtype)
        return (made, *output[1:]) if isinstance(output, (tuple, list)) else made

    return on_projection, on_block


def fitted_logits(model: Any, stack: BlockStack, ids: list[int], transforms: list, tokens: Any) -> Any:
    """The logits of the fitted model (the module's docstring): `model` unfolded, `ids` removed, each run's T (in run
    order, float64) applied by hooks; the model is as before on exit."""
    scale = output_scale(model)
    with removed_layers(model, ids, stack), owned_hooks() as hooks:
        for (first, _), T in zip(contiguous_runs(ids), transforms):
            projection = fold_target(model, stack, first - 1)
            on_projection, on_block = _replacing(T, scale)
            hooks.add(projection.register_forward_hook(on_projection))
            hooks.add(stack.blocks[first - 1].register_forward_hook(on_block))
        return model(input_ids=tokens, use_cache=False).logits


def fold_difference(teacher: Any, student: Any, stack_path: str, ids: list[int], transforms: list,
                    batches: list, device: str) -> float:
    """The largest |merged - fitted| logit on `batches`, relative to the largest fitted logit."""
    import torch

    stacks = find_blocks(teacher, stack_path), find_blocks(student, stack_path)
    worst = 0.0
    with torch.no_grad():
        for batch in batches:
            tokens = batch.input_ids.to(device)
            want = fitted_logits(teacher, stacks[0], ids, transforms, tokens).double()
            with removed_layers(student, ids, stacks[1]):
                got = student(input_ids=tokens, use_cache=False).logits.double()
            scale = max(float(want.abs().max()), 1e-30)
            worst = max(worst, float((got - want).abs().max()) / scale)
    return worst


def verify_folds(teacher: Any, student: Any, stack_path: str, ids: list[int], transforms: list, batches: list,
                 device: str, method: str) -> float:
    """The fold's relative difference (fold_difference); an ArchitectureError naming the architecture where it is
    beyond FOLD_NOISE of the model's dtype (or not a number)."""
    difference = fold_difference(teacher, student, stack_path, ids, transforms, batches, device)
    dtype = str(next(student.parameters()).dtype).removeprefix("torch.")
    if not difference <= FOLD_NOISE.get(dtype, FOLD_NOISE["float32"]):
        config = text_config(student)
        name = f"{getattr(config, 'model_type', None) or type(config).__name__} ({type(student).__name__})"
        raise ArchitectureError(f"--method {method}: on {name} the merged model's logits differ from the fitted "
                                f"model's by {difference:.3g} (relative, {dtype}; float noise is below "
                                f"{FOLD_NOISE.get(dtype, FOLD_NOISE['float32']):g}) on held-out positions: this "
                                "architecture changes its MLP output after the projection the map folds into, so no "
                                "fold is exact and nothing was saved as repaired; use --method lora or tail.")
    return difference
