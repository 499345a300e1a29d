"""lm-eval's own assertions and errors are caught at the boundary (issue 47, rule 7): --num-fewshot beyond a task's
few-shot split is one line naming the option and how many examples there are, before any model is scored; an
option that lm-eval's tasks alone read is refused for a task-free metric (rule 4)."""

from __future__ import annotations

from tests.helpers import assert_error, invoke
from tests.test_prune_lmeval import QUESTIONS, fewshot_dir  # noqa: F401 (the fixture)


def test_num_fewshot_beyond_the_fewshot_split_is_one_line(model_dirs, fewshot_dir, tmp_path):  # noqa: F811
    result = invoke("prune", model_dirs["llama"], "--task", "shot_mc", "--include-path", fewshot_dir,
                    "--num-fewshot", "1000", "--limit", "2", "--device", "cpu", "--out", tmp_path / "p")
    assert_error(result, "--num-fewshot 1000")
    assert f"({len(QUESTIONS)})" in result.output and "shot_mc" in result.output
    assert not (tmp_path / "p").exists()


def test_options_of_lm_eval_tasks_are_refused_for_a_task_free_metric(model_dirs, tmp_path):
    for extra, option in ((["--num-fewshot", "5"], "--num-fewshot 5"), (["--limit", "3"], "--limit 3")):
        result = invoke("prune", model_dirs["llama"], "--task", "kl", *extra, "--dataset", "builtin", "--device",
                        "cpu", "--out", tmp_path / "p")
        assert_error(result, f"{option} does nothing with --task kl")


def test_heal_and_gradnorm_refuse_options_their_method_ignores(model_dirs, tmp_path):
    result = invoke("heal", model_dirs["llama"], "--remove", "1", "--method", "lstsq", "--steps", "500",
                    "--lora-rank", "64", "--out", tmp_path / "h")
    assert_error(result, "does nothing with --method lstsq")
    assert not (tmp_path / "h").exists()
    result = invoke("gradnorm", "--arch", "tiny", "--monitor-every", "2", "--out", tmp_path / "g")
    assert_error(result, "--monitor-every 2 does nothing without --steps")
