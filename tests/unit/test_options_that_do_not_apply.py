"""One rule for options that do not apply (issue 47, rule 4): every setting of every command whose Mark says when it
applies, given while it does not, is refused by the CLI's resolution and by the library's call alike, in one line
naming the option and the setting that makes it idle; from a project file it is left alone. Block ids in any
spelling are one setting (--resume with --remove 2,3 after 2-3)."""

from __future__ import annotations

import dataclasses

import pytest

from layerprobe.commands import COMMANDS
from layerprobe.errors import ConfigError
from layerprobe.settings import applies_rules, check_call, flag_of, held_by, identity, mark_of, resolve, walk

# every setting of every command that applies only with others: its own Mark.applies, in a nested group too
# (gradnorm's TrainSettings), and the rule a command gives a shared group's field (prune's --tokens)
CASES = [(name, cls, path, f, rule) for name, cls in {c.name: c.settings for c in COMMANDS.values() if c.settings}.items()
         for path, f, rule in applies_rules(cls)]


def nested(path: str, value) -> dict:
    head, _, rest = path.partition(".")
    return {head: nested(rest, value) if rest else value}


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, value in b.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def other_value(f: dataclasses.Field):
    """A valid value of `f` other than its default."""
    mark, default = mark_of(f), f.default
    if isinstance(default, bool):  # a switch: the other spelling (--no-prefix-cache)
        return not default
    if mark.choices:
        return next(c for c in mark.choices if c != default)
    if mark.parse == "csv":
        return ("q_proj",)
    if isinstance(default, tuple):  # AdamW's betas
        return tuple(v * 0.9 for v in default)
    if isinstance(default, str):  # a text (--text-field, --dataset)
        return default + "_other"
    if default is None and str(f.type).startswith("str"):  # a path or a name (--include-path, --tokenizer)
        return "other"
    if isinstance(default, float) or "float" in str(f.type):
        return (default or 0.25) * 2
    return (default or 1) + 1


def local(cls: type, rule: tuple) -> tuple:
    """`rule` with its path from `cls`: a group resolved on its own (CurveSettings) holds it without its prefix."""
    if rule[0] == "any":
        return ("any", *(local(cls, each) for each in rule[1:]))
    paths = {path for path, _, _ in walk(cls)}
    path = rule[0]
    while path not in paths and "." in path:
        path = path.split(".", 1)[1]
    return (path, *rule[1:])


def idle_setting(cls: type, rule: tuple) -> dict:
    """The given values under which a setting with Mark.applies `rule` does nothing."""
    rule = local(cls, rule)
    fields = {path: f for path, f, _ in walk(cls)}
    if rule[0] == "any":  # idle where every one of its rules is
        given: dict = {}
        for each in rule[1:]:
            given = merge(given, idle_setting(cls, each))
        return given
    if rule[1] == "unset":  # given (gradnorm's MODEL: a checkpoint instead of the in-house family)
        return nested(rule[0], "minilm")
    if rule[1] == "nonzero":  # its default leaves it unset (given, so that a group such as --curve's exists)
        return nested(rule[0], fields[rule[0]].default) if "." in rule[0] else {}
    if rule[1] == "not":
        return nested(rule[0], rule[2][0])
    if rule[1] == "has":  # a list without the value (or any of the values) it needs
        return nested(rule[0], (next(c for c in mark_of(fields[rule[0]]).choices if c not in held_by(rule)),))
    choices = mark_of(fields[rule[0]]).choices or ("hellaswag",)  # --task names lm-eval's tasks, not a list
    idle = next(c for c in choices if c not in rule[1])
    return nested(rule[0], idle)


def applying(cls: type, rule: tuple) -> dict | None:
    """Given values under which a setting with Mark.applies `rule` does something (None: not written here)."""
    rule = local(cls, rule)
    if rule[0] == "any":
        return applying(cls, rule[1])
    if rule[1] == "has":
        return nested(rule[0], (held_by(rule)[0],))
    if rule[1] == "unset":
        return {}
    if rule[1] in ("nonzero", "not"):
        return None
    return nested(rule[0], rule[1][0])


def test_the_rule_covers_the_options_the_issue_names():
    named = {(name, path) for name, _, path, _, _ in CASES}
    for case in [("heal", "steps"), ("heal", "lora_rank"), ("prune", "num_fewshot"), ("gradnorm", "monitor_every"),
                 ("export", "gguf_type"),
                 # round 5's replay: curve, export, heal and toy options accepted silently before
                 ("prune", "curve.heal_lr"), ("prune", "curve.greedy_metric"), ("prune", "curve.greedy_ends"),
                 ("prune", "curve.heal_calibration_tokens"), ("prune", "sublayer"), ("export", "sublayer"),
                 ("export", "strategy"), ("export", "k"), ("heal", "strategy"), ("heal", "k"), ("toy", "mix_alpha"),
                 ("gradnorm", "alpha"),
                 # the independent replay after round 5: a nested group's options, and a shared group's as prune uses it
                 ("gradnorm", "train.lr"), ("gradnorm", "train.warmup"), ("gradnorm", "train.clip"),
                 ("gradnorm", "train.weight_decay"), ("gradnorm", "train.betas"), ("prune", "data.tokens"),
                 ("prune", "data.text_field"), ("prune", "data.seq_len"), ("prune", "data.dataset"),
                 # the replay after round 5's fixes (N_*): an lm-eval task's options with a task-free metric, a
                 # device map's offload without one, --allow-other-weights with nothing of other weights to
                 # apply, the in-house family's options with a checkpoint
                 ("prune", "max_memory"), ("prune", "prefix_cache"), ("prune", "include_path"), ("prune", "cluster"),
                 ("angular", "model.offload"), ("prune", "allow_other_weights"), ("export", "allow_other_weights"),
                 ("gradnorm", "arch"), ("gradnorm", "norm_type"), ("gradnorm", "tokenizer")]:
        assert case in named, case


@pytest.mark.parametrize("name, cls, path, f, rule", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_an_option_that_does_not_apply_is_refused_naming_it(name, cls, path, f, rule):
    given = merge(idle_setting(cls, rule), nested(path, other_value(f)))
    with pytest.raises(ConfigError) as caught:
        resolve(cls, given)
    message = str(caught.value)
    label = flag_of(f) or f.name  # a library-only setting (no flag) by its name
    if other_value(f) is False:  # a switch turned off is said as it is spelled: --no-prefix-cache
        label = "--no-" + label[2:]
    assert message.startswith(f"{label} ") and "does nothing with" in message and "\n" not in message
    assert " None" not in message, message  # nothing given reads 'without --heal', not 'with --heal None' 
    for each in local(cls, rule)[1:] if rule[0] == "any" else (local(cls, rule),):  # what makes it idle, each
        assert flag_of(next(g for p, g, _ in walk(cls) if p == each[0])) in message, message
    if not mark_of(f).project:  # the library's call: the same refusal
        config, _ = resolve(cls, idle_setting(cls, rule))
        owner = config
        for part in path.split(".")[:-1]:
            owner = getattr(owner, part)
        setattr(owner, f.name, other_value(f))
        with pytest.raises(ConfigError, match=f"^{label} (.* )?does nothing with"):
            check_call(config, cls, name)


@pytest.mark.parametrize("name, cls, path, f, rule", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_from_a_project_file_or_where_it_applies_it_is_taken(name, cls, path, f, rule):
    rule = local(cls, rule)
    if mark_of(f).project:
        groups = nested(path.rsplit(".", 1)[0], {}) if "." in path else {}  # its group resolved, as the CLI does
        config, sources = resolve(cls, merge(groups, idle_setting(cls, rule)), project={f.name: other_value(f)})
        assert sources[path].startswith("[tool.layerprobe]")
    where = applying(cls, rule)
    if where is not None:
        resolve(cls, merge(where, nested(path, other_value(f))))


def test_block_ids_in_any_spelling_are_one_setting():
    from layerprobe.config import HealConfig

    spelled = [identity(HealConfig(remove=text))["remove"] for text in ("2-3", "2,3", "3,2", " 2 , 3")]
    assert spelled == ["2-3"] * 4
    assert identity(HealConfig, saved={"remove": "2,3,5"})["remove"] == "2-3,5"
    assert identity(HealConfig(remove="last"))["remove"] == "last"


def test_overwrite_and_resume_together_are_refused_as_a_pair():
    """--overwrite replaces a run and --resume continues it (replay O_rsov): the pair is one line naming both, from
    the command line and the library alike, never a message that suggests the flag already given."""
    from layerprobe.config import AngularConfig, PruneConfig

    for cls in (AngularConfig, PruneConfig):
        with pytest.raises(ConfigError, match=r"^--overwrite .* --resume .*: pass one of them\.$"):
            resolve(cls, {"overwrite": True, "resume": True})
        with pytest.raises(ConfigError, match="pass one of them"):
            check_call(cls(overwrite=True, resume=True), cls, cls.__name__)
