"""Shared-prefix scoring for lm-eval pruning sweeps: one lm-eval LM answers every variant of the sweep.

While the unpruned model is evaluated, each batch of loglikelihood requests runs the original model once,
keeping the input of every block; each variant (layers p..p+n-1 removed) restarts from the stored input of
block p, runs blocks p+n..L-1, and the model's own tail (final norm, LM head) only at the continuation
positions. The per-variant answers are stored; each variant's own lm-eval evaluation (same task objects,
same requests) is then answered from the store. Batching, truncation and padding are lm-eval's HFLM's
(its Collator, its left truncation to max_length + 1, right padding, no attention mask), so the numbers are
those of the per-variant path. Requests the store does not hold (generation tasks, a resumed sweep) are
computed the plain way on the model as the sweep left it (layers removed).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from layerprobe.evaluation.prefix_cache import (PrefixGroup, Unsupported, blocks_run, chunks, fed, group_batch,
                                                prefix_groups, score_group, support, tail_logprobs)
from layerprobe.evaluation.taskfree import replay_variant, replayable
from layerprobe.evaluation.variants import Variant
from layerprobe.hooks import BlockCapture
# lm-eval internals (what each is used for: layerprobe/internals.py); this module is imported only for lm-eval sweeps
from layerprobe.internals import HFLM, Collator, pad_and_concat, register_model
from layerprobe.models.surgery import removed
from layerprobe.models.layers import BlockStack

log = logging.getLogger(__name__)


def shared_prefix_lm(model: Any, tokenizer: Any, batch_size: int, stack: BlockStack, variants: list[Variant],
                     max_memory: int | None = None, part: str = "block", prefix_cache: bool = True) -> Any:
    """An lm-eval LM that scores every variant of the sweep while the unpruned model is evaluated (prefix_cache:
    a few-shot prefix many requests share runs once per model, evaluation/prefix_cache.py)."""
    lm = SharedPrefixLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
    lm.attach(stack, variants, max_memory, part, prefix_cache)
    return lm


def default_memory(device: Any) -> int:
    """Bytes the stored activations may take: half the free GPU memory, or a quarter of the machine's RAM."""
    import os

    if getattr(device, "type", str(device)).startswith("cuda") and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(device)
        return free // 2
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4


def bytes_per_sequence(model: Any, stack: BlockStack, width: int) -> int:
    """Activations one sequence of `width` tokens holds during a shared pass: every block's input, plus logits."""
    param = next(model.parameters())
    hidden = model.get_input_embeddings().embedding_dim
    vocab = model.get_output_embeddings().out_features if model.get_output_embeddings() is not None else hidden
    return (len(stack.blocks) + 1) * width * hidden * param.element_size() + width * vocab * 4


SAVE_EVERY = 60.0  # seconds between saves of an unfinished shared pass


def request_key(context: list[int], continuation: list[int]) -> str:
    """One loglikelihood request, by its tokens and where the continuation starts (a JSON-safe key)."""
    digest = hashlib.sha1(repr((len(continuation), *context, *continuation)).encode("ascii"))
    return digest.hexdigest()


@register_model("layerprobe-shared")
class SharedPrefixLM(HFLM):
    """HFLM whose loglikelihood pass for the unpruned model also answers every variant (see module doc)."""

    def attach(self, stack: BlockStack, variants: list[Variant], max_memory: int | None = None,
               part: str = "block", prefix_cache: bool = True) -> None:
        self.stack, self.variants, self.part = stack, variants, part
        self.max_memory = max_memory  # bytes for the stored block inputs and logits of a batch (None: default)
        self.chosen: dict | None = None  # what the batch-size choice was, for the run's summary
        self.active: str | None = None  # None: the unpruned model (computes and stores every variant)
        self.store: dict[str, dict[tuple, tuple[float, bool]]] = {v.label: {} for v in variants}  # by tokens
        self.by_text: dict[str, dict[tuple, tuple[float, bool]]] = {v.label: {} for v in variants}  # by strings
        self.answered = self.computed = 0  # requests answered from the store / computed the plain way
        self.labels: list[str | None] = [None, *(v.label for v in variants)]  # the order of a saved answer's items
        self.saved: dict[str, list] = {}  # request key -> [[loglikelihood, greedy] per label]: this pass so far
        # (tokens of the requests answered, of all requests): a request weighs its fed tokens, so a pass whose
        # longest requests come first (HFLM's order) does not show an ETA many times too long
        self.tick: Callable[[int, int], None] = lambda done, total: None
        self.save: Callable[[dict], None] | None = None  # called with the pass so far, at most every SAVE_EVERY s
        self.saved_at = time.monotonic()
        # block-tokens computed (tokens x blocks run) and what per-variant lm-eval computes for the same rows
        self.block_tokens = self.naive_block_tokens = 0
        reason = support(self.model) if prefix_cache else "--no-prefix-cache"
        self.prefix_info = {"path": "prefix cache" if reason is None else "shared layers", "reason": reason,
                            "groups": 0, "rows": 0, "prefix_tokens": 0, "over_memory": 0}

    def prefix_cache(self) -> dict:
        """The prefix cache's part of the run's summary: which path ran (and why), and what it computed."""
        return {**self.prefix_info, "block_tokens": self.block_tokens, "naive_block_tokens": self.naive_block_tokens}

    def resume_pass(self, state: dict | None) -> None:
        """Answers an interrupted pass saved (`pass_state`): those requests are not computed again."""
        if not state:
            return
        where = {label: i for i, label in enumerate(state.get("labels", []))}
        wanted = [where.get(str(label)) for label in self.labels]  # a resumed sweep asks for fewer variants
        if None not in wanted:
            self.saved = {key: [answers[i] for i in wanted] for key, answers in state["answers"].items()}
            self.chosen = state.get("chosen")  # the batch the saved answers were computed at

    def pass_state(self) -> dict:
        """The pass so far, for the run's state.json: labels and each answered request's answers."""
        return {"labels": [str(label) for label in self.labels], "answers": self.saved, "chosen": self.chosen}

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        """A variant whose every request is in the store is answered before any tokenization."""
        if self.active is not None and requests:
            by_text = self.by_text[self.active]
            if all(r.args in by_text for r in requests):
                self.answered += len(requests)
                return [by_text[r.args] for r in requests]
        return super().loglikelihood(requests, disable_tqdm=disable_tqdm)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        if self.active is not None:
            store = self.store[self.active]
            keys = [(tuple(r[1]), tuple(r[2])) for r in requests]
            if keys and all(k in store for k in keys):
                self.answered += len(keys)
                return [store[k] for k in keys]
        if self.active is not None or self.backend != "causal" or not self.variants:
            self.computed += len(requests)
            return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
        return self._shared(requests)

    def _shared(self, requests):
        """Every label's answer to every request: those an interrupted pass saved, the rest computed."""
        keys = [request_key(r[1], r[2]) for r in requests]
        todo = [r for r, key in zip(requests, keys) if key not in self.saved]
        if todo:
            weights = [self.fed_width(r[1], r[2]) for r in requests]
            self._compute(todo, sum(w for w, key in zip(weights, keys) if key in self.saved), sum(weights))
        if self.save is not None:
            self.save(self.pass_state())
        answers = {label: [tuple(self.saved[key][i]) for key in keys] for i, label in enumerate(self.labels)}
        for label in self.store:
            for r, answer in zip(requests, answers[label]):
                self.store[label][(tuple(r[1]), tuple(r[2]))] = answer
                if r[0] is not None:  # (context, continuation) strings; None for rolling windows
                    self.by_text[label][tuple(r[0])] = answer
        self.computed += len(todo)
        return answers[None]

    def fed_width(self, context: list[int], continuation: list[int]) -> int:
        """The tokens HFLM feeds for one request (its left truncation to max_length): its weight in the progress."""
        return min(len(context) + len(continuation), self.max_length + 1) - 1

    def _compute(self, requests, done: int, total: int) -> None:
        """Score `requests` for the unpruned model and every variant, into self.saved (by request key); progress
        (done, total) in request tokens (fed_width)."""
        # HFLM's own ordering and grouping (one row serves all one-token continuations of a context)
        order = Collator(requests, sort_fn=lambda r: (-len(r[1] + r[2]), tuple(r[1] + r[2])),
                         group_by="contexts" if self.logits_cache else None,
                         group_fn=lambda r: r[-2] + r[-1][:-1])
        size = self.choose_batch(requests)
        self.tick(done, total)
        # request tokens per row token (a row serves every one-token continuation of its context): progress inside
        # a batch, whose variants can take minutes on a CPU, moves by the rows' share of the request tokens
        per_row = len(requests) / max(1, len({tuple(r[1] + r[2][:-1]) for r in requests}))
        rows = next(order.get_batched(n=0, batch_fn=None), [])  # every row, in HFLM's order
        self.naive_block_tokens += sum(len(fed(c, k, self.max_length)) for _, c, k in rows) * sum(
            blocks_run(v, len(self.stack), self.part, replayed=False) for v in [None, *self.variants])
        models = len(self.labels)

        def run(chunk: list, compute: Callable) -> None:
            nonlocal done
            weight = per_row * sum(self.fed_width(c, k) for _, c, k in chunk)
            per_variant = compute(chunk, lambda k: self.tick(done + int(weight * k / models), total))
            done = self._record(order, chunk, per_variant, done)
            self.tick(done, total)

        groups, loose = self._prefix_plan(rows)
        for chunk in chunks([rows[i] for i in loose], size):
            run(chunk, self._plain_batch)
            self._save_now(every=SAVE_EVERY)
        for length, members in groups:  # each group's cache is dropped before the next is built
            self._prefix_group([rows[i] for i in members], length, size, run)
            self._save_now(every=SAVE_EVERY)  # between groups: a resumed pass recomputes a group whole

    def _save_now(self, every: float) -> None:
        if self.save is not None and time.monotonic() - self.saved_at >= every:
            self.save(self.pass_state())  # a kill loses at most the last SAVE_EVERY seconds of the pass
            self.saved_at = time.monotonic()

    def _plain_batch(self, chunk: list, scored: Callable[[int], None]) -> dict:
        """HFLM's batch of whole requests: label -> log-probabilities at the scored positions."""
        inps, conts = [], []
        for _, context_enc, continuation_enc in chunk:
            inps.append(torch.tensor(fed(context_enc, continuation_enc, self.max_length), dtype=torch.long,
                                     device=self.device))
            conts.append(continuation_enc)
        inplens = [len(i) for i in inps]
        batched = pad_and_concat(max(inplens), inps, padding_side="right")  # (batch, width)
        # rows of the flattened (batch * width) positions whose logits are scored
        spans = [(i * batched.shape[1] + n - len(c), len(c)) for i, (n, c) in enumerate(zip(inplens, conts))]
        index = torch.cat([torch.arange(s, s + k) for s, k in spans]).to(self.device)
        return self._variant_logprobs(batched, index, scored, tokens=sum(inplens))

    def _record(self, order: Any, chunk: list, per_variant: dict, done: int) -> int:
        """Each row's answers into self.saved, one-token-continuation groups expanded exactly as HFLM does."""
        offsets = [0, *itertools.accumulate(len(cont) for _, _, cont in chunk)]  # row -> first scored position
        for row, (request_str, ctx_tokens, cont_tokens) in enumerate(chunk):
            first, last = offsets[row], offsets[row + 1]
            whole = ctx_tokens + cont_tokens[:-1]  # what every request of the row's group shares
            expanded = list(order.get_cache(req_str=request_str, cxt_toks=ctx_tokens, cont_toks=cont_tokens,
                                            logits=per_variant[None][first:last].unsqueeze(0)))
            # one entry per distinct request of the group (a request asked twice has one answer)
            group = {request_key(whole[:len(whole) + 1 - len(toks)], list(toks)):
                     torch.tensor(toks, dtype=torch.long, device=self.device).unsqueeze(0)  # (1, cont)
                     for _, toks, _ in expanded}
            for key in group:
                self.saved[key] = []
            for label in self.labels:
                logp = per_variant[label][first:last].unsqueeze(0)  # (1, cont, vocab)
                greedy = logp.argmax(dim=-1)
                for key, toks in group.items():
                    equal = bool((greedy[:, -toks.shape[1]:] == toks).all())
                    # trailing slice: continuations of one group may differ in length (HFLM does the same)
                    picked = torch.gather(logp[:, -toks.shape[1]:], 2, toks.unsqueeze(-1))
                    self.saved[key].append([float(picked.sum()), equal])
            done += len(expanded) * self.fed_width(ctx_tokens, cont_tokens)  # the group's requests share the row
        return done

    def _prefix_plan(self, rows: list) -> tuple[list, list]:
        """(groups, loose rows): rows sharing a long prefix of fed tokens, unless prefix reuse is off."""
        if self.prefix_info["reason"] is not None or not rows:
            return [], list(range(len(rows)))
        inputs = [fed(ctx, cont, self.max_length) for _, ctx, cont in rows]
        return prefix_groups(inputs, [len(t) - len(cont) for t, (_, _, cont) in zip(inputs, rows)])

    def _prefix_group(self, rows: list, length: int, size: int, run: Callable) -> None:
        """One group's rows against its prefix cache; the plain batches when the model cannot take it."""
        info = self.prefix_info
        group = None
        if info["reason"] is None:
            try:
                with torch.no_grad():
                    group = PrefixGroup(self, fed(rows[0][1], rows[0][2], self.max_length)[:length])
            except Unsupported as why:
                info["reason"], info["path"] = str(why), "shared layers"
        budget = self.max_memory if self.max_memory is not None else default_memory(self.device)
        width = max(len(fed(c, k, self.max_length)) for _, c, k in rows) - length
        rows_per_batch = (group_batch(self, group, width, bytes_per_sequence(self.model, self.stack, width), budget)
                          if group is not None else 0)
        if rows_per_batch == 0:  # no cache, or not even one row fits beside the group's caches
            info["over_memory"] += group is not None
            for chunk in chunks(rows, size):
                run(chunk, self._plain_batch)
            return
        info["groups"] += 1
        info["rows"] += len(rows)
        info["prefix_tokens"] += length
        self.block_tokens += group.block_tokens
        for chunk in chunks(rows, rows_per_batch):
            run(chunk, lambda part, scored: score_group(self, group, part, scored))

    def choose_batch(self, requests) -> int:
        """The user's batch size, or fewer sequences when the longest request's activations would not fit."""
        asked = self.batch_size if self.batch_size != "auto" else 64
        width = max(min(len(r[1]) + len(r[2]), self.max_length + 1) - 1 for r in requests)
        per_sequence = bytes_per_sequence(self.model, self.stack, width)
        budget = self.max_memory if self.max_memory is not None else default_memory(self.device)
        size = max(1, min(asked, budget // per_sequence))
        if size < asked:
            log.info("shared prefix: batch %d instead of %d to fit %.2f GiB", size, asked, budget / 2**30)
        self.chosen = {"batch_size": int(size), "asked": int(asked), "longest_tokens": int(width),
                       "gib_per_sequence": round(per_sequence / 2**30, 4), "budget_gib": round(budget / 2**30, 3)}
        return size

    def _variant_logprobs(self, batched: torch.Tensor, index: torch.Tensor,
                          scored: Callable[[int], None] = lambda k: None, tokens: int = 0) -> dict[str | None, torch.Tensor]:
        """label -> log-probabilities (positions, vocab) at the scored positions; None = unpruned. scored(k): k of
        the models (the unpruned one and each variant) are done. tokens: the batch's tokens, for the count."""
        out: dict[str | None, torch.Tensor] = {}
        layers = len(self.stack)
        with torch.no_grad(), BlockCapture(self.stack, keep_calls=True) as capture:
            logits = self.model(batched).logits  # (batch, width, vocab), as HFLM's _model_call
            states, calls = list(capture.states), list(capture.calls)
        flat = logits.reshape(-1, logits.shape[-1])
        out[None] = F.log_softmax(flat.index_select(0, index), dim=-1, dtype=self.softmax_dtype)
        self.block_tokens += tokens * layers
        del logits, flat
        scored(len(out))
        replayed = replayable(calls, self.variants, self.part)
        for variant in self.variants:  # removing a block whose outputs feed later blocks: a full forward
            if variant not in replayed:
                with torch.no_grad(), removed(self.model, variant.removed, self.part, self.stack):
                    flat = self.model(batched).logits.reshape(-1, out[None].shape[-1])
                out[variant.label] = F.log_softmax(flat.index_select(0, index), dim=-1, dtype=self.softmax_dtype)
                self.block_tokens += tokens * blocks_run(variant, layers, self.part, replayed=False)
                del flat
                scored(len(out))

        def hidden_of(variant: Variant) -> torch.Tensor:
            # (batch, width, d): the same with or without the variant's layers up to its first removed block
            self.block_tokens += tokens * blocks_run(variant, layers, self.part)
            return replay_variant(self.model, self.stack, calls, states, variant, self.part)

        tail_logprobs(self, capture, replayed, hidden_of, index, out, scored)
        return out

