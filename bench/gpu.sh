#!/usr/bin/env bash
# The GPU figures of bench/results/gpu.md, in one go on a CUDA machine (no hub, no network):
#   bash bench/gpu.sh check    correctness (tests/test_gpu.py), bf16 CLI runs at llama-1b, the angular pass at llama-7b
#   bash bench/gpu.sh scale    gradnorm of llama-7b at init, the shared-prefix lm-eval sweep at llama-1b
# Every command line is echoed before it runs, so the log says which command produced which figure.
# LOG (default: bench/results/gpu-<part>.log) receives everything.
set -uo pipefail
part=${1:-check}
log=${LOG:-bench/results/gpu-$part.log}
mkdir -p "$(dirname "$log")"
exec > >(tee "$log") 2>&1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
run() { echo; echo "\$ $*"; local t=$SECONDS; "$@"; local rc=$?; echo "[exit $rc after $((SECONDS - t)) s wall]"; }

echo "== $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| transformers', transformers.__version__, '| cpus', __import__('os').cpu_count())"

if [ "$part" = check ]; then
  run python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py
  tmp=$(mktemp -d)
  # the CLI's defaults on a GPU: bf16, SDPA attention, on an in-house llama-1b saved at init
  run python3 - "$tmp/l1b" <<'EOF'
import sys, torch, transformers
from layerprobe.models.inhouse import build, make_config
from layerprobe.models.load import embedded_model_dir
tok = transformers.AutoTokenizer.from_pretrained(str(embedded_model_dir()))
torch.manual_seed(0)
build(make_config("llama-1b", "pre", vocab_size=len(tok)), "cuda", torch.bfloat16).save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
EOF
  run python3 -m layerprobe angular "$tmp/l1b" --dataset builtin --tokens 65536 --device cuda --out "$tmp/ang"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print({k: s[k] for k in ('device','dtype','tokens','seconds','peak_gpu_memory_gib')})" "$tmp/ang/summary.json"
  run python3 -m layerprobe prune "$tmp/l1b" --task kl --dataset builtin --tokens 16384 --device cuda --out "$tmp/kl"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print({k: s[k] for k in ('device','dtype','tokens','seconds','least_important')})" "$tmp/kl/summary.json"
  run python3 bench/angular_overhead.py --arch llama-7b --device cuda --dtype bfloat16 --tokens 262144 --seq-len 1024 --batch-size 8 --repeats 3
elif [ "$part" = scale ]; then
  tmp=$(mktemp -d)
  run python3 -m layerprobe gradnorm --arch llama-7b --dtype bfloat16 --device cuda --dataset builtin --out "$tmp/g7b"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print({k: s[k] for k in ('device','dtype','seeds','batches','seq_len','batch_size','seconds','peak_gpu_memory_gib')})" "$tmp/g7b/summary.json"
  run python3 bench/prune_lmeval_overhead.py --arch llama-1b --device cuda --dtype bfloat16 --docs 1000 --batch-size 64 --cli-runs 0
fi
