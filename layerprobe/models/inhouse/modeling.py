"""The in-house LLaMA-style decoder. Block placements (LN = the block's norm, F = attention or MLP):

    pre       x + F(LN(x))
    post      LN(x + F(x))
    mix       post for the first floor(alpha * L) blocks, pre for the rest          (Mix-LN)
    lns       x + F(LN(x) / sqrt(l)), l the 1-based layer index                    (LayerNorm Scaling)
    deepnorm  LN(a * x + F(x)), a = (2L)^(1/4); value/output/FFN init scaled by b = (8L)^(-1/4)  (DeepNet)
    sandwich  x + LN'(F(LN(x)))
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput

from layerprobe.models.inhouse.configuration import ProbeLlamaConfig
from layerprobe.models.inhouse.fused_loss import linear_cross_entropy
from layerprobe.models.placement import residual_step


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def make_norm(config: ProbeLlamaConfig) -> nn.Module:
    if config.norm_type == "layernorm":
        return nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
    return RMSNorm(config.hidden_size, config.norm_eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """RoPE tables, computed per call (no buffers: nothing to re-initialize after loading)."""

    def __init__(self, config: ProbeLlamaConfig) -> None:
        super().__init__()
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.theta = config.rope_theta

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        steps = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=positions.device) / self.head_dim
        inv_freq = 1.0 / (self.theta ** steps)
        freqs = positions.float()[:, None] * inv_freq[None, :]  # (seq, head_dim/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


class Attention(nn.Module):
    def __init__(self, config: ProbeLlamaConfig, layer_idx: int) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.heads
        self.layer_idx = layer_idx
        d = config.hidden_size
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v_proj, self.o_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = rope  # (seq, head_dim)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, d))  # (batch, seq, d_model)


class MLP(nn.Module):
    def __init__(self, config: ProbeLlamaConfig) -> None:
        super().__init__()
        d, f = config.hidden_size, config.intermediate_size
        self.gate_proj, self.up_proj = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, config: ProbeLlamaConfig, layer_idx: int) -> None:
        super().__init__()
        self.placement = config.placement(layer_idx)
        self.self_attn = Attention(config, layer_idx)
        self.mlp = MLP(config)
        self.attn_norm, self.mlp_norm = make_norm(config), make_norm(config)
        if self.placement == "sandwich":
            self.attn_out_norm, self.mlp_out_norm = make_norm(config), make_norm(config)
        self.scale = 1.0 / math.sqrt(layer_idx + 1) if self.placement == "lns" else 1.0
        self.residual_alpha = (2.0 * config.num_hidden_layers) ** 0.25 if self.placement == "deepnorm" else 1.0

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, **kwargs: Any) -> torch.Tensor:
        x, p = hidden_states, self.placement  # (batch, seq, d_model)

        def attn(h):
            return self.self_attn(h, position_embeddings, attention_mask)

        sandwich = p == "sandwich"
        x = residual_step(p, x, attn, self.attn_norm, self.attn_out_norm if sandwich else None, self.scale,
                          self.residual_alpha)
        return residual_step(p, x, self.mlp, self.mlp_norm, self.mlp_out_norm if sandwich else None, self.scale,
                             self.residual_alpha)


class ProbeLlamaPreTrainedModel(PreTrainedModel):
    config_class = ProbeLlamaConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (RMSNorm, nn.LayerNorm)):
            nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def post_init(self) -> None:
        super().post_init()
        self._deepnorm_init()

    def _deepnorm_init(self) -> None:
        # DeepNet (decoder-only): Xavier normal with gain beta = (8L)^(-1/4) on value, output and FFN; q, k gain 1.
        beta = (8.0 * self.config.num_hidden_layers) ** -0.25
        with torch.no_grad():
            for block in self.modules():
                if isinstance(block, Block) and block.placement == "deepnorm":
                    attn, mlp = block.self_attn, block.mlp
                    for linear, gain in ((attn.q_proj, 1.0), (attn.k_proj, 1.0), (attn.v_proj, beta), (attn.o_proj, beta),
                                         (mlp.gate_proj, beta), (mlp.up_proj, beta), (mlp.down_proj, beta)):
                        nn.init.xavier_normal_(linear.weight, gain=gain)


class ProbeLlamaModel(ProbeLlamaPreTrainedModel):
    def __init__(self, config: ProbeLlamaConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([Block(config, i) for i in range(config.num_hidden_layers)])
        self.norm = make_norm(config)
        self.rotary = Rotary(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> BaseModelOutput:
        x = self.embed_tokens(input_ids)  # (batch, seq, d_model)
        t = input_ids.shape[1]
        rope = self.rotary(torch.arange(t, device=x.device), x.dtype)
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            mask = causal[None, None] & attention_mask.bool()[:, None, None, :]  # (batch, 1, seq, seq)
        for block in self.layers:
            x = block(x, attention_mask=mask, position_embeddings=rope)
        return BaseModelOutput(last_hidden_state=self.norm(x))


class ProbeLlamaForCausalLM(ProbeLlamaPreTrainedModel):
    _tied_weights_keys: dict = {}

    def __init__(self, config: ProbeLlamaConfig) -> None:
        super().__init__(config)
        self.model = ProbeLlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, return_logits: bool = True, **kwargs: Any) -> CausalLMOutput:
        """return_logits=False with labels: the loss alone, through the fused head + cross-entropy (no logits)."""
        hidden = self.model(input_ids, attention_mask=attention_mask).last_hidden_state
        target = None
        if labels is not None:
            # shift the labels, not the logits: no copy of the (batch, seq, vocab) tensor
            target = torch.full_like(labels, -100)
            target[:, :-1] = labels[:, 1:]
        if target is not None and not return_logits:
            return CausalLMOutput(loss=linear_cross_entropy(hidden, self.lm_head.weight, target), logits=None)
        logits = self.lm_head(hidden)  # (batch, seq, vocab)
        loss = None
        if target is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), target.view(-1), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)


# Placements initialized by the plain LLaMA recipe over the same parameters: under one seed their weights are
# equal, so one initialization serves them all (DeepNorm re-initializes, sandwich has extra norms).
LLAMA_INIT = ("pre", "post", "mix", "lns")


def shares_init(a: ProbeLlamaConfig, b: ProbeLlamaConfig) -> bool:
    """Whether a model of config `b` seeded like one of config `a` gets exactly a's initial weights."""
    if a.norm_placement not in LLAMA_INIT or b.norm_placement not in LLAMA_INIT:
        return False
    ignored = {"norm_placement", "mix_alpha"}  # how blocks are wired, not what they hold
    return ({k: v for k, v in a.to_dict().items() if k not in ignored}
            == {k: v for k, v in b.to_dict().items() if k not in ignored})


def build(config: ProbeLlamaConfig, device: str = "cpu", dtype: torch.dtype = torch.float32,
          like: ProbeLlamaForCausalLM | None = None) -> ProbeLlamaForCausalLM:
    """A freshly initialized model, allocated once in `dtype` on `device`.

    Constructed on the meta device (no memory), cast there, then given real storage and initialized in
    place: a llama-7b in bf16 never exists as a float32 copy, nor on the CPU first.
    `like`: a model built (and seeded) the same way whose config `shares_init` with this one; the new model
    takes over its weight tensors instead of drawing equal ones again (no copy: neither may train afterwards).
    """
    with torch.device("meta"):
        model = ProbeLlamaForCausalLM(config)
    if like is not None:
        if not shares_init(like.config, config):
            raise ValueError(f"a {like.config.norm_placement} model's weights are not a fresh "
                             f"{config.norm_placement} model's initialization")
        model.load_state_dict(like.state_dict(), assign=True)
        return model
    model = model.to(dtype).to_empty(device=device)
    with torch.no_grad():
        for module in model.modules():
            model._init_weights(module)
        model._deepnorm_init()
    return model


_registered = False


def register() -> None:
    """Make AutoConfig / AutoModel / AutoModelForCausalLM know model_type 'layerprobe_llama'."""
    global _registered
    if _registered:
        return
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    AutoConfig.register(ProbeLlamaConfig.model_type, ProbeLlamaConfig, exist_ok=True)
    AutoModel.register(ProbeLlamaConfig, ProbeLlamaModel, exist_ok=True)
    AutoModelForCausalLM.register(ProbeLlamaConfig, ProbeLlamaForCausalLM, exist_ok=True)
    _registered = True
