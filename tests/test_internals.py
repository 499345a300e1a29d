"""layerprobe/internals.py: every lm-eval and transformers internal it lists is where, and as, layerprobe uses it in
the installed releases; the rest of the package reaches them only through it; importing it stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import layerprobe
from layerprobe import internals
from layerprobe.internals import INTERNALS, Internal, locate, problems

PACKAGE = Path(layerprobe.__file__).parent
ROOT = PACKAGE.parent


@pytest.mark.parametrize("item", INTERNALS, ids=[i.name for i in INTERNALS])
def test_every_internal_is_where_and_as_layerprobe_uses_it(item):
    assert problems(item) == []
    assert getattr(internals, item.name) is locate(item)[0]  # what `from layerprobe.internals import X` gives


def test_a_moved_internal_is_found_at_its_older_place_or_named():
    older = Internal("Internal", "lm-eval", ("layerprobe.no_such_module:Internal", "layerprobe.internals:Internal"), "")
    assert locate(older) == (Internal, "layerprobe.internals:Internal")
    gone = Internal("Gone", "transformers", ("transformers:NoSuchName",), "")
    with pytest.raises(ImportError, match=r"transformers's Gone is at none of transformers:NoSuchName"):
        locate(gone)
    changed = Internal("Internal", "lm-eval", ("layerprobe.internals:Internal",), "", params={"": ("no_such_field",)},
                       attributes=("no_such_attribute",), source=("no such text",))
    assert len(problems(changed)) == 3


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_the_package_reaches_the_listed_internals_only_through_internals_py():
    places = {place.partition(":")[0] for item in INTERNALS for place in item.places}
    private = places - {"transformers"}  # PreTrainedModel's class is public; its private hooks are what is listed
    offenders = {str(path.relative_to(ROOT)): sorted(_imported_modules(path) & private)
                 for path in PACKAGE.rglob("*.py") if path.name != "internals.py"}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_internals_loads_neither_library():
    code = "import sys, layerprobe.internals; print(sorted(m for m in ('lm_eval', 'transformers', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_deprecation_warnings_are_not_silenced_for_the_suite():
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "filterwarnings" not in pytest_ini
