#!/usr/bin/env bash
# Every GPU check of the project, one after another, into one Markdown file.
#
#   scripts/gpu_check.sh [REPORT.md]          (default: runs/gpu_check/gpu-check-<UTC date and time>.md)
#   PYTHON=python3 QUICK=1 scripts/gpu_check.sh
#
# Runs from the repository's root on a machine with a CUDA GPU, with the project's environment (make setup) or,
# on an offline GPU machine that has torch, timm and transformers, with PYTHON=python3: the library is put on
# PYTHONPATH, so nothing needs installing for the checks 1-5. Each check runs under a time limit (seconds,
# LIMIT_SCALE=2 doubles them all) and its output, exit status and wall time go to the report; a failing check does
# not stop the next. In order of what they decide:
#   1. the CUDA tests (tests/test_gpu.py: strict float32 against the CPU, TF32 and bf16 within their tolerances);
#   2. training throughput of the paper-scale tracing ViT (bench train: fp32 with TF32, bf16; ce and aligned; no
#      augmentation and batch augmentation on the GPU), and strict float32 as their baseline;
#   3. where device="auto" trains (bench device: CPU and GPU step times of a ladder of models around the threshold);
#   4. the measured paper-scale plan (bench paper);
#   5. the CKA matrix of hidden states on the GPU (bench device-cka), then training in bf16 with torch.compile;
#   6. the logit lens beside plain transformers (bench lens; needs the provisioned SmolLM2 asset, or
#      LENS_RANDOM=<folder with its config.json and tokenizer> for random weights: timings only);
#   7. one alignment notebook (a04) at the default scale, one seed, timed (needs papermill: make setup);
#   8. the alignment notebooks a01-a07 at the default scale side by side, against their serial times on 2 CPU
#      cores (606 s, 2026-11-26): on Ray (--jobs 7) where ray is installed, else as 7 runner processes of 2 threads;
#   9. the rehearsal of the paper scale on the GPU for a subset (python -m layersim.tools.rehearse: fixture data and
#      models of the published sizes, counts cut; its times in runs/rehearsal/summary.json), at most ~6 minutes;
#  10. training throughput of the paper-scale ViT in bf16 with torch.compile at batch 1024 (the goal: 20,000
#      images/s on one H100 or H200; plain timm reached 25,798).
# QUICK=1 runs shorter versions of 2-4 (for a first look within a few minutes of device time); STEPS="7 8" runs only
# the checks named (their numbers; 2 includes 2b, 5 includes 5b). On a machine without papermill or the data,
# scripts/gpu_carry.sh brings both.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
REPORT=${1:-runs/gpu_check/gpu-check-$(date -u +%Y%m%d-%H%M).md}
SCALE=${LIMIT_SCALE:-1}
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "$PY sees no CUDA GPU: these checks are for a GPU machine (make test covers the CPU)" >&2
  exit 2
fi
mkdir -p "$(dirname "$REPORT")"
export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}  # an offline GPU machine: fail at once rather than retry the hub

{
  echo "# GPU checks, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
  echo "- python: $PY ($($PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1))"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  echo "- CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo
} > "$REPORT"

check() {  # check NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$(( $2 * SCALE )) start rc
  shift 2
  if [ -n "${STEPS:-}" ] && ! [[ " $STEPS " == *" ${name%%[a-z.]*} "* ]]; then return 0; fi
  echo "== $name (limit ${limit} s)" >&2
  start=$(date +%s)
  { echo "## $name"; echo; echo '```'; echo "\$ $*"; } >> "$REPORT"
  timeout "$limit" "$@" >> "$REPORT" 2>&1
  rc=$?
  { echo '```'; echo; echo "exit status $rc$([ $rc = 124 ] && echo ' (time limit)'), $(( $(date +%s) - start )) s"; echo; } >> "$REPORT"
}

if [ -n "${QUICK:-}" ]; then
  TRAIN=(--steps 10); DEVICE=(--steps 5); PAPER=(--steps 1)
else
  TRAIN=(--steps 40); DEVICE=(--steps 20); PAPER=(--steps 3)
fi

check "1. CUDA tests" 300 "$PY" -m pytest tests/test_gpu.py -m gpu -p no:cacheprovider -q -o addopts=""
check "2a. training throughput (fp32 = TF32, bf16)" 300 "$PY" -m layersim.tools.bench train "${TRAIN[@]}" \
  --augmentations none,batch
check "2b. training throughput in strict float32 (the baseline of TF32 and bf16)" 300 env LAYERSIM_FLOAT32=strict \
  "$PY" -m layersim.tools.bench train "${TRAIN[@]}" --precisions fp32 --augmentations none
check "3. device=auto: CPU and GPU step times" 180 "$PY" -m layersim.tools.bench device "${DEVICE[@]}"
check "4. the measured paper-scale plan" 420 "$PY" -m layersim.tools.bench paper "${PAPER[@]}" \
  --json "$(dirname "$REPORT")/paper-plan.json"
check "5. CKA of hidden states on the GPU" 120 "$PY" -m layersim.tools.bench device-cka
check "5b. training throughput, bf16 + torch.compile" 300 "$PY" -m layersim.tools.bench train "${TRAIN[@]}" \
  --precisions bf16 --augmentations none --compile 1
LENS=(--device cuda)  # LENS_RANDOM=DIR: the model from DIR's config.json and tokenizer, random weights
[ -n "${LENS_RANDOM:-}" ] && LENS+=(--random-weights "$LENS_RANDOM")
check "6. logit lens" 180 "$PY" -m layersim.tools.bench lens "${LENS[@]}"
ALIGN="a01 a02 a03 a04 a05 a06 a07"
if "$PY" -c "import papermill" 2>/dev/null; then
  check "7. a04 at the default scale, one seed" 600 "$PY" -m layersim.tools.runner --scale default --nb a04 --seeds 1
  if "$PY" -c "import ray" 2>/dev/null; then
    check "8. a01-a07 at the default scale side by side (on Ray, --jobs 7, one seed)" 900 \
      "$PY" -m layersim.tools.runner --scale default --nb "${ALIGN// /,}" --seeds 1 --jobs 7
  else
    check "8. a01-a07 at the default scale side by side (7 processes of 2 threads, one seed)" 900 \
      env OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 xargs -P 7 -I NB \
      "$PY" -m layersim.tools.runner --scale default --nb NB --seeds 1 <<< "${ALIGN// /$'\n'}"
  fi
else
  echo "## 7-8. the default-scale notebooks: skipped (papermill is not installed: make setup, or scripts/gpu_carry.sh)" \
    >> "$REPORT"
fi
if "$PY" -c "import papermill" 2>/dev/null; then
  check "9. the paper scale rehearsed on the GPU (a subset)" 420 \
    "$PY" -m layersim.tools.rehearse --nb "${REHEARSE:-t01_cos_vs_cka,t06_transfer,r01_block_similarity,c01_cka_structure}"
fi
check "10. training throughput, bf16 + torch.compile, batch 1024" 300 "$PY" -m layersim.tools.bench train \
  "${TRAIN[@]}" --batch 1024 --precisions bf16 --augmentations none --compile 1
echo "report: $REPORT" >&2
