"""LayerprobeLightningCallback: the LayerMonitor inside a Lightning Trainer (optional: `pip install lightning`),
logging through the Trainer's own loggers (TensorBoard, CSV, W&B, ...) under `layerprobe/<quantity>/layer_<l>`.

    trainer = lightning.Trainer(max_steps=300, callbacks=[LayerprobeLightningCallback(tokenizer, every=50,
                                                                                      out="reports/mine/monitor")])
    trainer.fit(module, loader)

The LightningModule is the transformer or holds it (found as the first module with input embeddings and a block
stack, or passed as `model=`). The gradients are read in on_before_optimizer_step (every micro-batch of a gradient
accumulation summed; Lightning calls it before its own gradient clipping, so these norms are unclipped), the probe
is measured once the optimizer step is taken (the weights a checkpoint saved at that step holds).
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError:
        raise ImportError("LayerprobeLightningCallback needs Lightning: pip install lightning") from None

from layerprobe.config import MonitorSettings
from layerprobe.integrations.monitor import LayerMonitor


def _transformer(module: Any) -> Any:
    """The model the blocks live in: the first module (the LightningModule itself, then its sub-modules in order)
    that has input embeddings and a block stack."""
    from layerprobe.errors import LayerprobeError
    from layerprobe.models.layers import find_blocks

    for candidate in module.modules():
        if not hasattr(candidate, "get_input_embeddings"):
            continue
        try:
            find_blocks(candidate)
        except LayerprobeError:
            continue
        return candidate
    raise LayerprobeError(f"No transformer with a block stack found in {type(module).__name__}: pass "
                          "LayerprobeLightningCallback(model=the_transformer, ...).")


class LayerprobeLightningCallback(Callback):
    """Every `every` optimizer steps (and at the step training starts from), per-layer d(l, 1), Block Influence,
    norm and variance on the probe batches and each block's gradient norm, logged and appended to `out`.
    `run` is the finished RunResult once fitting ends."""

    def __init__(self, tokenizer: Any = None, settings: MonitorSettings | None = None, *, model: Any = None,
                 probe: list | None = None, **options: Any) -> None:
        self.tokenizer, self.settings, self.model, self.probe, self.options = tokenizer, settings, model, probe, options
        self.monitor: LayerMonitor | None = None
        self.run = None
        self._trainer: Any = None
        self._grads: tuple[int, list[float]] | None = None

    def _log(self, values: dict, step: int) -> None:
        for logger in getattr(self._trainer, "loggers", None) or []:
            logger.log_metrics(dict(values), step=step)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._trainer = trainer
        model = self.model if self.model is not None else _transformer(pl_module)
        self.monitor = LayerMonitor(model, self.tokenizer, self.settings, probe=self.probe, log=self._log,
                                    **self.options)
        self.monitor.summary_extra = {"lightning": {"gradient_clip_val": trainer.gradient_clip_val,
                                            "accumulate_grad_batches": int(trainer.accumulate_grad_batches)}}
        if self.monitor.due(trainer.global_step):
            self.monitor.record(trainer.global_step)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        step = trainer.global_step + 1  # the update about to be taken
        if self.monitor is not None and self.monitor.due(step):
            self._grads = (step, self.monitor.gradients())

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if self.monitor is None or self._grads is None or self._grads[0] != step:
            return  # a step not due, or a micro-batch of an accumulation before its optimizer step
        grads, self._grads = self._grads[1], None
        self.monitor.record(step, grads)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.monitor is not None:
            self.run = self.monitor.finish(trainer.global_step)
