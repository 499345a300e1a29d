"""Mixture-of-experts routing per layer, from forward hooks on the routers: how sure the router is (the mean
entropy of its softmax over the experts) and how evenly its top-k picks spread the load over them."""

from __future__ import annotations

import math
from typing import Any

import torch

from layerprobe.hook_owner import HookOwner, Hooks


def router_classes(model: Any) -> dict[type, int]:
    """The router classes transformers itself records router logits from (`_can_record_outputs`), each with the
    index of the logits in what it returns (0 mostly; Llama 4's router returns its scores first)."""
    found: dict[type, int] = {}
    for module in model.modules():
        recorders = getattr(type(module), "_can_record_outputs", None) or {}
        recorder = recorders.get("router_logits") if isinstance(recorders, dict) else None
        target = getattr(recorder, "target_class", None)
        if isinstance(target, type):
            found.setdefault(target, int(getattr(recorder, "index", 0) or 0))
    return found


def find_routers(model: Any, stack: Any) -> dict[int, tuple[Any, int]]:
    """block index -> (its router module, the index of the logits in its output); dense blocks are absent."""
    classes = router_classes(model)
    routers = {}
    for index, block in enumerate(stack.blocks):
        for module in block.modules():
            kind = next((c for c in classes if isinstance(module, c)), None)
            if kind is not None:
                routers[index] = (module, classes[kind])
                break
    return routers


class RouterAccumulator(HookOwner):
    """Context manager: per MoE layer, float64 sums of the normalized routing entropy and the top-k pick counts
    over the measured positions. update(rows) after each forward reads what the routers returned."""

    def __init__(self, model: Any, stack: Any) -> None:
        self.routers = find_routers(model, stack)
        self.layers = len(stack)
        config = getattr(model, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.default_k = getattr(text, "num_experts_per_tok", None) or 1
        self.experts = max((self._experts(m) for m, _ in self.routers.values()), default=0)
        self.entropy_sum = torch.zeros(self.layers, dtype=torch.float64)
        self.count = torch.zeros(self.layers, dtype=torch.float64)
        self.picks = torch.zeros(self.layers, max(self.experts, 1), dtype=torch.float64)
        self._last: dict[int, Any] = {}

    @staticmethod
    def _experts(module: Any) -> int:
        weight = getattr(module, "weight", None)
        return int(getattr(module, "num_experts", 0) or (weight.shape[0] if weight is not None else 0))

    def __bool__(self) -> bool:
        return bool(self.routers)

    def attach(self, hooks: Hooks) -> None:
        for index, (module, at) in self.routers.items():
            hooks.add(module.register_forward_hook(self._hook(index, at)))

    def detach(self) -> None:
        self._last.clear()

    def _hook(self, index: int, at: int):
        def hook(module, args, output):
            self._last[index] = (output, at, getattr(module, "top_k", None) or self.default_k)

        return hook

    def update(self, rows: torch.Tensor) -> None:
        """Add the positions `rows` (flat indices into batch x seq) of the last forward."""
        for index, (output, at, k) in self._last.items():
            items = output if isinstance(output, tuple) else (output,)
            logits = items[at].float()
            logits = logits.reshape(-1, logits.shape[-1]).index_select(0, rows.to(logits.device))
            experts = logits.shape[-1]
            log_p = torch.log_softmax(logits.double(), dim=-1)
            entropy = -(log_p.exp() * log_p).sum(-1) / math.log(experts)
            picks = [x for x in items if isinstance(x, torch.Tensor) and not x.is_floating_point()]
            if picks:  # the router's own top-k picks, where it returns them
                chosen = picks[0].reshape(-1, picks[0].shape[-1]).index_select(0, rows.to(picks[0].device))
            else:
                chosen = torch.topk(logits, k, dim=-1).indices
            self.entropy_sum[index] += entropy.sum().cpu()
            self.count[index] += entropy.numel()
            self.picks[index, :experts] += torch.bincount(chosen.reshape(-1).cpu(), minlength=experts)[:experts].double()
        self._last.clear()

    def state(self) -> torch.Tensor:
        return torch.cat([self.entropy_sum, self.count, self.picks.flatten()])

    def load_state(self, state: torch.Tensor) -> None:
        state = state.double().cpu()
        self.entropy_sum = state[: self.layers].clone()
        self.count = state[self.layers : 2 * self.layers].clone()
        self.picks = state[2 * self.layers :].reshape(self.layers, -1).clone()

    def result(self) -> tuple[list[float], list[float]]:
        """(router_entropy, expert_load) per block, NaN for dense blocks: the mean of H(softmax(logits)) / ln E over
        positions, and the entropy of the share of top-k picks each expert got, / ln E (1 = even load)."""
        entropy, load = [], []
        for index in range(self.layers):
            if index not in self.routers or self.count[index] == 0:
                entropy.append(float("nan"))
                load.append(float("nan"))
                continue
            entropy.append(float(self.entropy_sum[index] / self.count[index]))
            share = self.picks[index] / self.picks[index].sum()
            share = share[share > 0]
            experts = self._experts(self.routers[index][0]) or self.picks.shape[1]
            load.append(float(-(share * share.log()).sum() / math.log(experts)))
        return entropy, load
