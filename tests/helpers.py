"""Helpers several test files use: the CLI runner (`invoke`), the demo reference's tables (DEMO_REFERENCE),
independent references (a pruned copy built by hand, hand-rolled metrics), the split device map, and the check that
a CLI error is layerprobe's own one line."""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

import math
import re

from typer.testing import CliRunner

from layerprobe.cli import app
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches
from layerprobe.models.layers import find_blocks
from layerprobe.settings import mark_of, walk

# The committed demo run's tables and records (reports/demo's CSV and JSON files, no figures): the reference a quick
# demo is compared with, and real runs to damage by hand. A copy, so reports/demo can be regenerated on its own;
# tests/data/README.md says how it was made.
DEMO_REFERENCE = Path(__file__).resolve().parent / "data" / "demo"

@functools.cache
def package_nodes() -> tuple[tuple[str, tuple[ast.AST, ...]], ...]:
    """Every module of the layerprobe package as ('layerprobe/x.py', every node of its syntax tree), parsed once per
    session for the tests that scan the source (a parse and walk of the whole package per test was most of their
    time). Read only."""
    import layerprobe

    package = Path(layerprobe.__file__).parent
    return tuple((str(path.relative_to(package.parent)), tuple(ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
                 for path in sorted(package.rglob("*.py")))


SPLIT = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk", "model.layers.2": "disk",
         "model.layers.3": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}


def independent_pruned(folder, head_cls, drop):
    """A fresh model with num_hidden_layers = L - len(drop), weights copied by renumbered keys."""
    full = head_cls.from_pretrained(folder).eval()
    stack = find_blocks(full).path
    config = full.config.__class__.from_dict(full.config.to_dict())
    keep = [i for i in range(config.num_hidden_layers) if i not in drop]
    config.num_hidden_layers = len(keep)
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = [full.config.layer_types[i] for i in keep]
    small = head_cls.from_config(config) if hasattr(head_cls, "from_config") else head_cls(config)
    pattern = re.compile(rf"^{re.escape(stack)}\.(\d+)\.")
    state = {}
    for key, value in full.state_dict().items():
        match = pattern.match(key)
        if match:
            old = int(match.group(1))
            if old in drop:
                continue
            key = pattern.sub(f"{stack}.{keep.index(old)}.", key)
        state[key] = value
    small.load_state_dict(state, strict=True)
    return small.eval()


def reference_metric(task, full, pruned, folder, tokens, seq_len, batch_size):
    """Hand-rolled ppl / kl / drift over the same packed batches, float64."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    total, count = 0.0, 0
    for batch in batches(open_corpus("builtin").texts(), tok, seq_len, batch_size, tokens):
        ids = batch.input_ids
        with torch.no_grad():
            a, b = full(input_ids=ids), pruned(input_ids=ids)
        if task == "drift":
            x, y = a.last_hidden_state.double(), b.last_hidden_state.double()
            for vx, vy in zip(x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])):
                total += 1 - float(vx @ vy) / (float(vx.norm()) * float(vy.norm()))
                count += 1
            continue
        p, q = a.logits.double().log_softmax(-1), b.logits.double().log_softmax(-1)
        if task == "ppl":
            for row in range(ids.shape[0]):
                for t in range(ids.shape[1] - 1):
                    total -= float(q[row, t, ids[row, t + 1]])
                    count += 1
        else:
            total += float((p.exp() * (p - q)).sum())
            count += ids.numel()
    return math.exp(total / count) if task == "ppl" else total / count


def invoke(*args, **kwargs):
    """Run the CLI in-process (typer's runner), every argument as the string a shell would pass."""
    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


def assert_error(result, needle: str) -> None:
    """A bad input ends in layerprobe's own one-line error naming the problem: exit 2, 'error: ...' holding
    `needle`, no traceback (a usage error from typer, which would also exit 2, does not pass)."""
    text = result.output
    assert result.exit_code == 2, text
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, text
    assert needle in " ".join(lines[0].split()), text


def read_records(folder: Path):
    """A run's per-document records (samples.csv.gz), `removed` as text."""
    import pandas as pd

    return pd.read_csv(folder / "samples.csv.gz", dtype={"removed": str})


def assert_shards_merge_to(records, tmp_path: Path, *args) -> Path:
    """`layerprobe <args>` run as two shards (--shard 1/2 and 2/2) and merged: the merged run's per-document records
    are `records` (the unsharded run's) exactly, order aside. Returns the merged folder for the caller's own checks."""
    import pandas as pd

    shards = []
    for k in (1, 2):
        shard = tmp_path / f"shard{k}"
        result = invoke(*args, "--shard", f"{k}/2", "--out", str(shard))
        assert result.exit_code == 0, result.output
        shards.append(str(shard))
    merged = tmp_path / "merged"
    result = invoke("merge", *shards, "--out", str(merged))
    assert result.exit_code == 0, result.output
    key = ["removed", "doc_id"]
    pd.testing.assert_frame_equal(read_records(merged).sort_values(key).reset_index(drop=True),
                                  records.sort_values(key).reset_index(drop=True), check_exact=True)
    return merged


# ---- settings: another valid value for any declared setting (tests/test_settings.py, tests/unit) ----------

# Values that are valid where a plain "other" string would be refused by an earlier check than the resume's
MEANINGFUL = {"shard": ("1/2", "2/2", "1/3"), "layers": ("0", "1", "0,1"), "record_steps": ("0", "0,1", "1")}


def setting_field(cls: type, path: str) -> tuple[dataclasses.Field, type]:
    for dotted, f, owner in walk(cls):
        if dotted == path:
            return f, owner
    raise KeyError(path)


def changed(cls: type, path: str, value):
    """Another valid value for the setting at `path`, from its Mark (choices, bounds) and its current value."""
    f, owner = setting_field(cls, path)
    mark = mark_of(f)
    if f.name in MEANINGFUL:
        options = MEANINGFUL[f.name]
        return options[(options.index(value) + 1) % len(options)] if value in options else options[0]
    if isinstance(value, list):
        if mark.choices:
            return tuple(value[:-1]) if len(value) > 1 else tuple(c for c in mark.choices if c not in value)[:1]
        return tuple(v * 0.9 for v in value)
    if mark.choices:
        return next(c for c in mark.choices if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.1
    if value is None:
        kind = typing_kind(owner, f.name)
        return {int: 1, float: 0.5, bool: True}.get(kind, "other")
    return f"{value}-other"


def typing_kind(owner: type, name: str):
    from layerprobe.settings import _base_type, group_of

    group = group_of(owner, name)
    return group or _base_type(owner, name)


def replaced(config, path: str, value):
    *groups, name = path.split(".")
    if not groups:
        if isinstance(value, type):
            value = value()
        return dataclasses.replace(config, **{name: value})
    inner = getattr(config, groups[0])
    return dataclasses.replace(config, **{groups[0]: replaced(inner, ".".join([*groups[1:], name]), value)})


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def jitter_norms(model, seed=0):
    """Give every LayerNorm a non-trivial weight and bias (a seeded draw): at init (weight 1, bias 0) a Post-LN
    block's LayerNorm(x) equals its already-normalized input x, which would hide what the norm does."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.5 * torch.randn(module.bias.shape, generator=generator))
    return model


def zero_by_hand(model, arch, part, layers, how="branch"):
    """A fresh copy whose sub-layer forwards are replaced by hand-written lambdas. BERT (Post-LN, the residual and
    the norm inside the sub-layer module): how='branch' zeroes the dense projection the module adds to its input
    (LayerNorm(x + 0)); how='module' returns the module's residual input (x, the norm skipped too)."""
    import torch

    blocks = {"gpt2": lambda m: m.transformer.h, "bert": lambda m: m.encoder.layer}.get(arch, lambda m: m.model.layers)(model)
    for index in layers:
        block = blocks[index]
        if arch == "bert" and how == "branch":
            dense = block.attention.output.dense if part == "attn" else block.output.dense
            dense.forward = lambda x, n=dense.out_features: x.new_zeros(*x.shape[:-1], n)
        elif arch == "bert" and part == "attn":
            block.attention.forward = lambda hidden_states, *a, **k: (hidden_states, None)
        elif arch == "bert":
            block.output.forward = lambda hidden_states, input_tensor: input_tensor
        elif part == "attn":
            module = block.attn if arch == "gpt2" else block.self_attn
            module.forward = lambda hidden_states, *a, **k: (torch.zeros_like(hidden_states), None)
        else:
            block.mlp.forward = lambda hidden_states, *a, **k: torch.zeros_like(hidden_states)
    return model


def hf_next_distances(model, tok, texts, seq_len: int, batch_size: int, tokens: int, layers: int) -> list[float]:
    """Reference d(x_l, x_l+1) for l < layers from HF's own hidden states (output_hidden_states: block inputs
    0..L-1), arccos of the float64 cosine over every real position, on the same packed batches layerprobe reads."""
    import torch

    from layerprobe.data.packing import batches

    sums, count = [0.0] * layers, 0
    for batch in batches(texts, tok, seq_len, batch_size, tokens):
        with torch.no_grad():
            states = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           output_hidden_states=True).hidden_states
        keep = batch.attention_mask.flatten().bool()
        for layer in range(layers):
            a, b = (states[i].reshape(-1, states[i].shape[-1])[keep].double() for i in (layer, layer + 1))
            sums[layer] += float(torch.arccos(torch.nn.functional.cosine_similarity(a, b, dim=-1).clamp(-1, 1)).sum())
        count += int(keep.sum())
    return [total / math.pi / count for total in sums]


def reload_without_layerprobe(folder, ids: list[int], cwd) -> dict:
    """Load `folder` with plain transformers in a fresh process that never imports layerprobe: {'layers': the
    config's num_hidden_layers, 'blocks': len(model.model.layers), 'logits': the flattened logits of `ids`}."""
    import json
    import subprocess
    import sys

    script = ("import json, sys, torch, transformers\n"
              f"m = transformers.AutoModelForCausalLM.from_pretrained({str(folder)!r}).eval()\n"
              "with torch.no_grad():\n"
              f"    out = m(input_ids=torch.tensor([{list(ids)}])).logits\n"
              "assert 'layerprobe' not in sys.modules\n"
              "print(json.dumps({'layers': m.config.num_hidden_layers, 'blocks': len(m.model.layers), "
              "'logits': out.flatten().tolist()}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def reference_sequences(task, full, pruned, folder, tokens, seq_len, batch_size):
    """Hand-rolled per-sequence (sum over positions, positions) of ppl's negative log-likelihood or kl, float64, over
    the same packed batches as reference_metric."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    out = []
    for batch in batches(open_corpus("builtin").texts(), tok, seq_len, batch_size, tokens):
        ids = batch.input_ids
        with torch.no_grad():
            p, q = (m(input_ids=ids).logits.double().log_softmax(-1) for m in (full, pruned))
        for row in range(ids.shape[0]):
            if task == "ppl":
                out.append((-sum(float(q[row, t, ids[row, t + 1]]) for t in range(ids.shape[1] - 1)),
                            ids.shape[1] - 1))
            else:
                out.append((float((p[row].exp() * (p[row] - q[row])).sum()), ids.shape[1]))
    return out
