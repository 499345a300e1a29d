"""layerprobe inside training (layerprobe.integrations): the HF Trainer callback and the plain-loop LayerMonitor
against independent references (`layerprobe angular` on the checkpoint the Trainer saved, gradient norms summed by
hand from the same step's gradients), training left bitwise as it was, gradient accumulation, peft, DDP, the
TensorBoard logger, and the monitor run kind read by report and compare."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import transformers

from layerprobe.config import AngularConfig, DataOptions, ModelOptions, MonitorSettings
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches
from layerprobe.errors import ConfigError
from layerprobe.integrations import LayerMonitor, LayerprobeCallback
from layerprobe.integrations.outputs import crossover_step
from layerprobe.settings import Mark, mark_of, walk
from tests.conftest import tiny_config
from tests.helpers import hf_next_distances, invoke

PROBE = dict(dataset="builtin", tokens=256, seq_len=32, batch_size=4)
KEYS = ("angular", "block_influence", "grad_norm", "norm", "variance")


def _model(tok, seed: int = 0):
    torch.manual_seed(seed)
    config = tiny_config("llama", len(tok), tok.bos_token_id, tok.eos_token_id)
    config.attention_dropout = 0.1  # dropout draws random numbers: the probe must leave the stream as it was
    return transformers.LlamaForCausalLM(config)


def _dataset(tok, count: int = 16) -> list[dict]:
    texts = open_corpus("builtin").texts()
    found = [b.input_ids[0] for b in batches(texts, tok, 32, 1, 32 * (count + 8))][8 : 8 + count]
    return [{"input_ids": ids, "labels": ids} for ids in found]  # not the probe's first tokens


class HandGrads(transformers.TrainerCallback):
    """The reference: at the same moment the callback reads them, each block's gradients summed element by
    element in float64, the blocks found by their parameter names."""

    def __init__(self) -> None:
        self.norms: dict[int, list[float]] = {}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        sums: dict[int, float] = {}
        for name, param in model.named_parameters():
            if ".layers." in name and param.grad is not None:
                layer = int(name.split(".layers.")[1].split(".")[0])
                sums[layer] = sums.get(layer, 0.0) + sum(x * x for x in param.grad.double().flatten().tolist())
        self.norms[state.global_step + 1] = [math.sqrt(sums[k]) for k in sorted(sums)]


def _train(tok, out: Path, model=None, monitor: bool = True, accumulation: int = 1, save: bool = False,
           report: tuple = (), every: int = 2) -> tuple:
    model = model if model is not None else _model(tok)
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=4, per_device_train_batch_size=2, gradient_accumulation_steps=accumulation,
        learning_rate=3e-3, logging_steps=1, save_strategy="steps" if save else "no", save_steps=2, seed=0,
        report_to=list(report), use_cpu=True, dataloader_num_workers=0,
        disable_tqdm=True)
    hand = HandGrads()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_dataset(tok), processing_class=tok,
                                   callbacks=[hand])
    callback = LayerprobeCallback(every=every, out=str(out / "monitor"), **PROBE).attach(trainer) if monitor else None
    trainer.train()
    return trainer, callback, hand


@pytest.fixture(scope="module")
def trained(tokenizer, tmp_path_factory):
    """One monitored Trainer run: checkpoints at steps 2 and 4, the TensorBoard logger on where it installs."""
    out = tmp_path_factory.mktemp("trainer")
    report = ("tensorboard",) if _has_tensorboard() else ()
    return out, *_train(tokenizer, out, save=True, report=report)


def _has_tensorboard() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def _layers_at(table: pd.DataFrame, step: int) -> pd.DataFrame:
    return table[table["step"] == step].set_index("layer")


def test_logged_values_equal_angular_on_the_saved_checkpoint(trained, tmp_path):
    out, trainer, callback, _ = trained
    table = callback.run.monitor
    assert sorted(table["step"].unique()) == [0, 2, 4]
    for step in (2, 4):
        run = __import__("layerprobe").angular(AngularConfig(
            model=ModelOptions(str(out / f"checkpoint-{step}"), dtype="float32", device="cpu"),
            data=DataOptions(**PROBE), lens_tokens=0, out=str(tmp_path / f"angular-{step}")))
        ours, theirs = _layers_at(table, step), run.layers.set_index("layer")
        for column in ("distance_next", "norm", "variance", "block_influence"):
            pd.testing.assert_series_equal(ours[column], theirs[column], check_names=False, rtol=1e-6, atol=1e-9)
        logged = next(h for h in trainer.state.log_history if h["step"] == step and "layerprobe/angular/layer_0" in h)
        assert logged["layerprobe/angular/layer_1"] == pytest.approx(theirs.loc[1, "distance_next"], abs=1e-9)
        assert logged["layerprobe/norm/layer_4"] == pytest.approx(theirs.loc[4, "norm"], rel=1e-6)


def test_gradient_norms_equal_a_hand_sum_of_the_same_steps_gradients(trained):
    _, trainer, callback, hand = trained
    table = callback.run.monitor
    assert _layers_at(table, 0)["grad_norm"].isna().all()  # before the first backward: none
    for step in (2, 4):
        ours = _layers_at(table, step)["grad_norm"].dropna().tolist()
        assert ours == pytest.approx(hand.norms[step], rel=1e-9)
        logged = next(h for h in trainer.state.log_history if h["step"] == step and "layerprobe/grad_norm/layer_0" in h)
        assert [logged[f"layerprobe/grad_norm/layer_{l}"] for l in range(4)] == pytest.approx(hand.norms[step], rel=1e-9)
    assert not any("layerprobe/grad_norm/layer_0" in h for h in trainer.state.log_history if h["step"] in (1, 3))


def test_training_is_bitwise_the_same_without_the_callback(trained, tokenizer, tmp_path):
    _, with_trainer, _, _ = trained
    plain, _, _ = _train(tokenizer, tmp_path, monitor=False)
    losses = [[h["loss"] for h in t.state.log_history if "loss" in h] for t in (with_trainer, plain)]
    assert len(losses[0]) == 4 and losses[0] == losses[1]
    for (name, a), b in zip(with_trainer.model.named_parameters(), plain.model.parameters()):
        assert torch.equal(a, b), name
    assert with_trainer.model.training == plain.model.training


def test_tensorboard_event_file_holds_the_keys(trained):
    if not _has_tensorboard():
        pytest.skip("tensorboard is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = trained[0]
    files = list(out.rglob("events.out.tfevents.*"))  # under output_dir/runs/
    assert files
    tags = set()
    for file in files:
        accumulator = EventAccumulator(str(file))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    for key in KEYS:  # the Trainer's TensorBoard and W&B loggers put 'train/' before every training key
        assert f"train/layerprobe/{key}/layer_3" in tags, sorted(tags)[:20]


def test_gradient_accumulation_reads_the_summed_gradients(tokenizer, tmp_path):
    trainer, callback, hand = _train(tokenizer, tmp_path, accumulation=2, every=3)
    table = callback.run.monitor
    assert sorted(table["step"].unique()) == [0, 3, 4]  # 4: the final weights, measured when training ends
    assert _layers_at(table, 3)["grad_norm"].dropna().tolist() == pytest.approx(hand.norms[3], rel=1e-9)
    assert _layers_at(table, 4)["grad_norm"].isna().all()
    assert callback.run.summary["trainer"] == {"max_grad_norm": 1.0, "gradient_accumulation_steps": 2}


def test_peft_wrapped_model(tokenizer, tmp_path):
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_model(tokenizer), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                    lora_dropout=0.0))
    trainer, callback, hand = _train(tokenizer, tmp_path, model=model)
    table = callback.run.monitor
    assert _layers_at(table, 4)["grad_norm"].dropna().tolist() == pytest.approx(hand.norms[4], rel=1e-9)
    merged = trainer.model.merge_and_unload().eval()  # the weights of step 4, LoRA folded in
    reference = hf_next_distances(merged, tokenizer, open_corpus("builtin").texts(), PROBE["seq_len"],
                                  PROBE["batch_size"], PROBE["tokens"], 3)  # the last HF state is after the norm
    assert _layers_at(table, 4)["distance_next"].iloc[:3].tolist() == pytest.approx(reference, abs=1e-5)


def test_plain_loop_leaves_the_model_and_rng_as_they_were(tokenizer, tmp_path):
    model = _model(tokenizer).train()
    model.model.layers[1].eval()  # a mixed state must come back as it was, module by module
    modes = [m.training for m in model.modules()]
    monitor = LayerMonitor(model, tokenizer, every=3, out=str(tmp_path / "run"), **PROBE)
    ids = _dataset(tokenizer, 2)[0]["input_ids"][None]
    model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    state = torch.get_rng_state()
    assert monitor.step(2) is None and monitor.rows == []
    values = monitor.step(3)
    assert set(values) >= {f"layerprobe/{k}/layer_0" for k in KEYS}
    assert torch.equal(torch.get_rng_state(), state)
    assert [m.training for m in model.modules()] == modes
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    assert not any(b._forward_pre_hooks or b._forward_hooks for b in model.model.layers)
    run = monitor.close()
    assert (run.folder / "monitor.png").is_file() and not (run.folder / ".layerprobe.lock").exists()
    assert json.loads((run.folder / "summary.json").read_text())["steps"] == [3]


def test_settings_and_errors(tokenizer):
    import layerprobe

    assert layerprobe.LayerMonitor is LayerMonitor and layerprobe.LayerprobeCallback is LayerprobeCallback
    for path, f, _ in walk(MonitorSettings):
        assert isinstance(mark_of(f), Mark), path
    model = _model(tokenizer)
    with pytest.raises(ConfigError, match="tokenizer"):
        LayerMonitor(model)
    with pytest.raises(ConfigError, match="Unknown monitor setting"):
        LayerMonitor(model, tokenizer, evrey=5)
    with pytest.raises(ConfigError):
        LayerMonitor(model, tokenizer, every=0)
    code = "import sys, layerprobe.integrations as i; i.LayerMonitor; assert 'typer' not in sys.modules and 'rich' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_crossover_step_by_hand():
    rows = []
    for step, deep in ((0, 0.5), (10, 0.1), (20, 0.4), (30, 0.2), (40, 0.1)):
        rows += [{"step": step, "layer": l, "distance_next": d} for l, d in enumerate((0.3, 0.3, 0.3, deep, deep, deep))]
    table = pd.DataFrame(rows)
    assert crossover_step(table) == 30  # below at 10, above at 20, below from 30 on
    assert crossover_step(table[table["step"] <= 20]) is None


def test_report_and_compare_accept_a_monitor_run(trained, tmp_path):
    folder = trained[2].run.folder
    result = invoke("report", str(folder), "--out", str(tmp_path / "report"))
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report" / "report.md").read_text()
    assert "During training" in page and "deep third's mean d(l, 1)" in page
    result = invoke("compare", str(folder), str(folder))
    assert result.exit_code == 0 and "monitor d(l,1)" in result.output, result.output
    changed = tmp_path / "changed"
    changed.mkdir()
    for file in folder.iterdir():
        (changed / file.name).write_bytes(file.read_bytes())
    table = pd.read_csv(changed / "monitor.csv")
    table.loc[(table["step"] == 4) & (table["layer"] == 2), "distance_next"] += 0.1
    table.to_csv(changed / "monitor.csv", index=False)
    result = invoke("compare", str(folder), str(changed))
    assert result.exit_code == 1 and "step 4 layer 2" in result.output, result.output


DDP_SCRIPT = '''
import os, sys, torch, transformers
from layerprobe.integrations import LayerMonitor
from tests.conftest import tiny_config
from layerprobe.models.load import embedded_model_dir
tok = transformers.AutoTokenizer.from_pretrained(embedded_model_dir())
torch.distributed.init_process_group("gloo")
rank, size = torch.distributed.get_rank(), torch.distributed.get_world_size()
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(tiny_config("llama", len(tok), tok.cls_token_id, tok.sep_token_id))
ddp = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
logged = open(f"{sys.argv[1]}/logged-{size}-{rank}.txt", "w")
monitor = LayerMonitor(ddp, tok, every=1, out=f"{sys.argv[1]}/run-{size}", log=lambda v, s: logged.write(f"{s}\\n"),
                       dataset="builtin", tokens=320, seq_len=32, batch_size=2)
data = torch.randint(5, 1000, (4, 16), generator=torch.Generator().manual_seed(1))
for step in (1, 2):
    mine = data[rank * 4 // size : (rank + 1) * 4 // size]  # the same global batch of 4, split over the ranks
    ddp(input_ids=mine, labels=mine).loss.backward()
    monitor.step(step)
    optimizer.step()
    optimizer.zero_grad()
monitor.close()
logged.close()
'''


@pytest.mark.slow
def test_ddp_rank_zero_logs_and_equals_one_process(tmp_path, monkeypatch):
    import runpy
    import socket

    import torch.distributed as dist

    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
           str(tmp_path)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # the same script as one process of a gloo group, in this process (what torchrun --nproc_per_node 1 would start,
    # without a launcher and two interpreters' start-up)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", [str(script), str(tmp_path)])
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert (tmp_path / "logged-2-0.txt").read_text() == "1\n2\n"
    assert (tmp_path / "logged-2-1.txt").read_text() == ""  # rank 1 measures its share, rank 0 logs
    two, one = (pd.read_csv(tmp_path / f"run-{n}" / "monitor.csv") for n in (2, 1))
    assert two["tokens"].tolist() == one["tokens"].tolist()
    for column in ("distance_next", "block_influence", "norm", "variance", "grad_norm"):
        pd.testing.assert_series_equal(two[column], one[column], rtol=1e-5, atol=1e-8)


def test_lightning_callback_against_hand_gradients_and_hidden_states(tokenizer, tmp_path):
    """The Lightning callback (optional extra): with a gradient accumulation of 2, the gradient norms equal a hand
    float64 sum at the same moment (before Lightning's clipping), the last step's d(l, 1) equals HF's own hidden
    states of the trained model on the probe tokens, and Lightning's CSV logger holds the keys."""
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.loggers import CSVLogger

    from layerprobe.integrations import LayerprobeLightningCallback

    class Module(lightning.LightningModule):
        def __init__(self, model):
            super().__init__()
            self.lm = model

        def training_step(self, batch, _):
            return self.lm(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    class Hand(lightning.Callback):
        def __init__(self):
            self.norms = {}

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            sums = {}
            for name, param in pl_module.named_parameters():
                if ".layers." in name and param.grad is not None:
                    layer = int(name.split(".layers.")[1].split(".")[0])
                    sums[layer] = sums.get(layer, 0.0) + float((param.grad.double() ** 2).sum())
            self.norms[trainer.global_step + 1] = [math.sqrt(sums[k]) for k in sorted(sums)]

    torch.manual_seed(0)
    module = Module(_model(tokenizer))
    hand = Hand()
    callback = LayerprobeLightningCallback(tokenizer, every=2, out=str(tmp_path / "monitor"), **PROBE)
    loader = torch.utils.data.DataLoader(_dataset(tokenizer), batch_size=2)
    trainer = lightning.Trainer(max_steps=4, accumulate_grad_batches=2, gradient_clip_val=0.5, accelerator="cpu",
                                devices=1, logger=CSVLogger(tmp_path / "logs"), callbacks=[hand, callback],
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, loader)
    table = pd.read_csv(tmp_path / "monitor" / "monitor.csv")
    assert sorted(table["step"].unique()) == [0, 2, 4]
    for step in (2, 4):
        got = _layers_at(table, step)["grad_norm"].dropna().tolist()
        assert got == pytest.approx(hand.norms[step], rel=1e-6)
    module.lm.eval()
    expected = hf_next_distances(module.lm, tokenizer, list(open_corpus("builtin").texts()), PROBE["seq_len"],
                                 PROBE["batch_size"], PROBE["tokens"], 3)  # HF's last state is after the final norm
    assert _layers_at(table, 4)["distance_next"].tolist()[:3] == pytest.approx(expected, rel=1e-6)
    logged = pd.read_csv(next((tmp_path / "logs").rglob("metrics.csv")))
    assert {f"layerprobe/{key}/layer_0" for key in KEYS} <= set(logged.columns)
    assert json.loads((tmp_path / "monitor" / "summary.json").read_text())["lightning"]["accumulate_grad_batches"] == 2


def test_an_interrupted_monitor_run_is_named_by_the_next_run_and_by_the_readers(tokenizer, tmp_path, caplog):
    """Issue 39, item 3: training stopped mid-run leaves its folder unfinished; the next run with the same out=
    says at once (a WARNING, which Python prints even without logging configured) that it writes to a sibling,
    and report / compare on the original folder name it as unfinished and point to the sibling."""
    from layerprobe.runs.folder import abandon_run_dirs

    model = _model(tokenizer)
    out = tmp_path / "monitor-mix"
    first = LayerMonitor(model, tokenizer, every=1, out=str(out), **PROBE)
    first.step(1)
    abandon_run_dirs(interrupted=True)  # what Ctrl-C (or the process's exit) does to a run it never closed
    assert (out / "monitor.csv").is_file() and (out / ".layerprobe.lock").is_file()
    with caplog.at_level("WARNING", logger="layerprobe.notice"):
        second = LayerMonitor(model, tokenizer, every=1, out=str(out), **PROBE)
    assert second.folder != out and second.folder.parent == out.parent
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1 and f"'{out}' already holds an unfinished run" in said[0] and str(second.folder) in said[0]
    second.step(1)
    sibling = second.folder
    second.close()
    for args in (["report", out, "--out", tmp_path / "page"], ["compare", out, sibling]):
        result = invoke(*args)
        text = " ".join(result.output.split())
        assert result.exit_code == 2 and f"'{out}' is an unfinished run" in text, text
        assert f"went to '{sibling}'" in text, text
        assert "holds no layerprobe runs" not in text
