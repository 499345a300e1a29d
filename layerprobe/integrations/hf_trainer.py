"""LayerprobeCallback: the LayerMonitor inside a Hugging Face Trainer, logging through the Trainer's own loggers
(`report_to`: TensorBoard, W&B, MLflow, ...) under `layerprobe/<quantity>/layer_<l>`.

    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    LayerprobeCallback(every=50, out="reports/mine/monitor").attach(trainer)
    trainer.train()

The gradients are read in on_pre_optimizer_step (the step's own backward, every micro-batch of a gradient
accumulation summed and, under DDP, averaged; after the Trainer's max_grad_norm clipping), the probe is measured in
on_step_end (after the update: the weights a checkpoint saved at that step holds).
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

from layerprobe.config import MonitorSettings
from layerprobe.integrations.monitor import LayerMonitor

logger = logging.getLogger(__name__)


class LayerprobeCallback(TrainerCallback):
    """Every `every` optimizer steps (and at the step training starts from), per-layer d(l, 1), Block Influence,
    norm and variance on the probe batches and each block's gradient norm, logged and appended to `out`.
    tokenizer: for the probe batches (default: the Trainer's processing_class). `run` is the finished RunResult."""

    def __init__(self, tokenizer: Any = None, settings: MonitorSettings | None = None, *, trainer: Any = None,
                 probe: list | None = None, **options: Any) -> None:
        self.tokenizer, self.settings, self.probe, self.options = tokenizer, settings, probe, options
        self.trainer = trainer
        self.monitor: LayerMonitor | None = None
        self.run = None
        self._grads: tuple[int, list[float]] | None = None  # (the step they belong to, per-block norms)

    def attach(self, trainer: Any) -> LayerprobeCallback:
        """Log through `trainer` (its report_to loggers and log_history) and add this callback to it."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def _log(self, values: dict, step: int) -> None:
        if self.trainer is not None:
            # Trainer.log clears control.should_log: kept as it was, so the step's own loss is still logged
            pending = self.trainer.control.should_log
            self.trainer.log(dict(values))  # the Trainer logs at its global_step: the step measured
            self.trainer.control.should_log = pending

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                       **kwargs: Any) -> None:
        if self.trainer is None:
            logger.warning("LayerprobeCallback was not attached to its Trainer (LayerprobeCallback(...).attach(trainer)):"
                           " its values go to the run folder only, not to the Trainer's loggers.")
        self.monitor = LayerMonitor(model, self.tokenizer or processing_class, self.settings, probe=self.probe,
                                    log=self._log, **self.options)
        self.monitor.summary_extra = {"trainer": {"max_grad_norm": float(args.max_grad_norm),
                                          "gradient_accumulation_steps": int(args.gradient_accumulation_steps)}}
        if self.monitor.due(state.global_step):
            self.monitor.record(state.global_step)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step + 1  # the update about to be taken
        if self.monitor is not None and self.monitor.due(step):
            self._grads = (step, self.monitor.gradients())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step
        if self.monitor is not None and self.monitor.due(step):
            grads = self._grads[1] if self._grads is not None and self._grads[0] == step else None
            self._grads = None
            self.monitor.record(step, grads)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.monitor is not None:
            self.run = self.monitor.finish(state.global_step)
