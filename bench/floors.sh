#!/usr/bin/env bash
# Proves the dependency floors pyproject.toml states: a fresh venv in a temp folder, torch first, then every other
# dependency (core and every extra) pinned at its stated floor (`name>=X` -> `name==X`), then the unit tier.
#   bash bench/floors.sh                         the floors as pyproject.toml states them
#   bash bench/floors.sh transformers==4.57.0    one floor replaced (to bisect a floor that fails)
# TORCH (default 2.13.0, the CPU wheel this project installs) is the torch installed first; TORCH=2.4.0 proves
# torch's floor, from PyPI's Linux wheel with its CUDA libraries (2.6 GiB), or from TORCH_INDEX (e.g.
# https://download.pytorch.org/whl/cpu) where that index is reachable. KEEP=1 keeps the temp folder.
# TESTS (default: the unit tier and the tiny-model tests of what a release may move: the internals, the block
# table, surgery, norm placements, packing, the corpus readers, every record's function refs) is what pytest
# runs. Prints every direct dependency's installed version, then pytest's summary; exits with pytest's status.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/layerprobe-floors-XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
echo "== $(date -u +%FT%TZ) python $(python3 -c 'import sys; print(sys.version.split()[0])') in $work"

python3 -m venv "$work/venv"
. "$work/venv/bin/activate"
# pip, without the warnings a pip.conf listing local index folders that lack a package prints once per package
pip() { command pip "$@" 2> >(grep -v "is neither a file nor a directory" >&2); }
pip install -q --upgrade pip
torch=${TORCH:-2.13.0}
pip install -q "torch==$torch" ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}

# pyproject's floors as == pins (the overrides given as arguments replace theirs); torch pinned at what is installed
python3 - "$root/pyproject.toml" "torch==$torch" "$@" > "$work/floors.txt" <<'EOF'
import re, sys, tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
wanted = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
def key(name): return re.sub(r"[-_.]+", "-", name).lower()
pins = {}
for requirement in wanted:
    found = re.match(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+)", requirement)
    if found is None:
        sys.exit(f"no floor (>=) in {requirement!r}: every dependency states one")
    pins[key(found[1])] = f"{found[1]}=={found[2]}"
for override in sys.argv[2:]:
    name = override.split("==")[0]
    pins[key(name)] = override
print("\n".join(pins[k] for k in sorted(pins)))
EOF
echo "== constraints"; cat "$work/floors.txt"
extras=$(python3 -c 'import sys, tomllib; print(",".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]))' "$root/pyproject.toml")
if ! pip install -e "$root[$extras]" --constraint "$work/floors.txt" > "$work/pip.log" 2>&1; then
  grep -A 12 "conflict is caused by" "$work/pip.log" || tail -n 30 "$work/pip.log"  # which floors disagree
  exit 1
fi

echo "== installed"
python - "$work/floors.txt" <<'EOF'
import re, sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    name = re.split(r"[=<>]", line.strip())[0]
    print(f"{name} {version(name)}")
EOF
cd "$root"
tests=${TESTS:-tests/unit tests/test_internals.py tests/test_layers.py tests/test_surgery.py tests/test_norms.py tests/test_packing.py tests/test_corpus_readers.py tests/test_command_refs.py}
echo "== python -m pytest $tests -q"
python -m pytest $tests -q -p no:cacheprovider
