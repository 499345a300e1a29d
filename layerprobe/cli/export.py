"""`layerprobe export MODEL --remove 20-27 --out DIR`: the pruned model as a plain transformers checkpoint."""

from __future__ import annotations


from layerprobe.cli.common import call, out, progress_bar, resolve_settings
from layerprobe.cli.options import model_argument, with_settings
from layerprobe.commands import EXPORT
from layerprobe.config import ExportConfig, ModelOptions


@with_settings(ExportConfig, skip=("model.device_map", "model.offload", "model.quantize"), required=("out",),
               arguments={"model": "model.model"})
def export(
    model: str = model_argument("Default with --from-curve: the curve run's model."),
    given: dict | None = None,
) -> None:
    """Save the model without the chosen layers as a checkpoint that plain from_pretrained loads."""
    from layerprobe.cli.common import fail

    base = ExportConfig(model=ModelOptions(model=None)) if given.get("from_curve") else None  # the curve's model
    config, _ = resolve_settings(EXPORT, given, base=base)
    if config.model.model is None and config.from_curve is None:
        raise fail("No MODEL given: pass the model to export (or --from-curve RUN, which names it).")
    from layerprobe.commands.export import run_export

    with progress_bar() as progress:
        done = call(run_export, config, progress)
    gain = done["gain"]
    what = (f"removed {done['removed_label']} ({done['part']}) of" if done["removed"] else "removed nothing (--remove "
            "none):")
    out.print(f"{what} {done['num_layers_original']} layers -> {done['num_layers_exported']} layers "
              f"[bold]{done['out']}[/bold]", highlight=False)
    if gain:
        show_gain(gain, done["device"])
    if done["verified_max_difference"] is not None:
        out.print(f"verified: reloaded with {done['loads_with'].split('.from_pretrained')[0]}, largest output difference "
                  f"{done['verified_max_difference']:.2g}", highlight=False)
    written = done.get("gguf_export")
    if written:
        check = written["checked"]
        pattern = ", sliding-window pattern written" if written["sliding_window_pattern_written"] else ""
        if written.get("converted_from") == "transformers":
            types = ", ".join(f"{n} {t}" for t, n in sorted(written["tensors_by_type"].items()))
            out.print(f"gguf: {written['file']} ({written['gguf_type']}), converted from transformers as llama.cpp's "
                      f"converter does: {written['architecture']}, {written['tensors']} tensors ({types}), "
                      f"block_count {written['block_count']}{pattern}", highlight=False)
            changed = written.get("tensor_types_changed")
            if written.get("origin_gguf"):
                out.print(f"types changed against {written['origin_gguf']}: " + (
                    "unknown (the file is gone)" if changed is None else
                    ", ".join(f"{k} {v}" for k, v in changed.items()) or "none"), highlight=False)
        else:
            out.print(f"gguf: {written['file']} ({written['quantization']}), {written['tensors']} tensors copied byte "
                      f"for byte, block_count {written['block_count']}, per-layer arrays cut: "
                      f"{', '.join(check['per_layer_arrays']) or 'none in the source'}{pattern}", highlight=False)
        if written["verified_max_difference"] is not None:
            out.print(f"verified: loaded with transformers' GGUF loader, largest logit difference "
                      f"{written['verified_max_difference']:.2g} (tolerance {written['tolerance']:g})", highlight=False)


def _speed(value: float) -> str:
    """Tokens per second with the digits that tell two speeds apart: 1,234 and 56.7, never 3 vs 3 for 2.9 vs 3.4."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def show_gain(gain: dict, device: str) -> None:
    """The gain as users serve the model: each ratio shortened over original (export and heal)."""
    decode = (f"; decode {gain['decode_speed_ratio']:.2f}x the tokens/s ({_speed(gain['decode_tokens_per_second_exported'])} "
              f"vs {_speed(gain['decode_tokens_per_second_original'])} tokens/s, batch {gain['decode_batch']}, "
              f"{gain['decode_new_tokens']} new tokens)" if gain.get("decode_speed_ratio") else "")
    kv = (f"; KV cache {gain['kv_cache_ratio']:.2f}x ({gain['kv_cache_bytes_per_token_exported']:,.0f} bytes/token)"
          if gain.get("kv_cache_ratio") is not None else "")
    out.print(f"parameters {gain['parameters_exported']:,} of {gain['parameters_original']:,} "
              f"({gain['parameter_ratio']:.1%}), weights {gain['weights_ratio']:.2f}x; prefill time per token "
              f"{gain['time_ratio']:.2f}x the original (batch {gain['timing_batch'][0]} x {gain['timing_batch'][1]}, "
              f"median of {gain['timing_repeats']} alternated, {device}){decode}{kv}", highlight=False)
