#!/usr/bin/env bash
# GPU check of kernelcheck on a lent CUDA machine (an H200): build the CUDA library for
# sm_90, run the CUDA tests of the suite, then the logp checks and the bench on the GPU.
# Every step has a timeout and its exit code goes to $OUT/exit_codes.txt; a failing step
# never stops the later ones, so all results come back. A healthy run of every step took
# 5.6 minutes on an H200 (2026-11-30); the timeouts add up to more than one lease call's
# 600 s, so name a subset with STEPS where a hang must not eat the call.
#
#   OUT=/some/dir scripts/gpu_check.sh      (run from anywhere; OUT defaults to /tmp/kernelcheck_gpu_out)
#   STEPS="build pytest_cuda controls" scripts/gpu_check.sh   (only these steps; default: all)
#
# Needs there: python3 with a CUDA build of torch plus typer, rich, numpy, tabulate
# (the device image has them), cmake, ninja (optional) and nvcc.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/kernelcheck_gpu_out}
mkdir -p "$OUT"
: >"$OUT/exit_codes.txt"
: >"$OUT/steps.log" # one log for all steps: $OUT returns at most 8 files
START=$(date +%s)
export PYTHONUNBUFFERED=1

say() { echo "=== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/steps.log"; }

# step NAME SECONDS CMD...: run with a timeout, log to $OUT/steps.log and the console,
# record "NAME rc" (124 = timed out), never abort the script. Skipped unless STEPS names it
# (configure goes with build, repros with controls).
STEPS=${STEPS:-all}
want() {
    [[ $STEPS == all || " $STEPS " == *" $1 "* ]] && return 0
    [[ $1 == configure && " $STEPS " == *" build "* ]] && return 0
    [[ $1 == repros && " $STEPS " == *" controls "* ]]
}
step() {
    local name=$1 limit=$2
    shift 2
    want "$name" || return 0
    say "step $name (timeout ${limit}s): $*"
    local rc=0
    timeout --kill-after=10 "$limit" "$@" > >(tee -a "$OUT/steps.log") 2>&1 || rc=$?
    echo "$name $rc" >>"$OUT/exit_codes.txt"
    say "step $name: exit $rc"
    return 0
}

# Python: $PYTHON, else the project's .venv when its torch sees a GPU, else python3.
PY=${PYTHON:-}
if [[ -z $PY ]]; then
    PY=python3
    if [[ -x $ROOT/.venv/bin/python ]] &&
        "$ROOT/.venv/bin/python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' \
            2>/dev/null; then
        PY=$ROOT/.venv/bin/python
    fi
fi
say "python: $PY ($("$PY" --version 2>&1))"
"$PY" - <<'PYEOF' || say "WARNING: this python lacks something kernelcheck needs (see above)"
import importlib
for name in ("torch", "typer", "rich", "numpy", "tabulate"):
    try:
        m = importlib.import_module(name)
        print(f"  {name} {getattr(m, '__version__', '')}")
    except Exception as exc:
        print(f"  {name} MISSING: {exc}")
import torch
print(f"  torch.version.cuda={torch.version.cuda} cuda available={torch.cuda.is_available()}")
PYEOF

# kernelcheck itself from the source tree (no install needed: the native libraries are
# found through KERNELCHECK_NATIVE_DIR).
if ! "$PY" -c 'import kernelcheck' 2>/dev/null; then
    export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
KC=("$PY" -m kernelcheck)
# Wall time and peak RSS: GNU time where the image has it, else bash's own wall clock.
TIMED=(/usr/bin/time -v)
[[ -x /usr/bin/time ]] || TIMED=(bash -c 'SECONDS=0; "$@"; rc=$?; echo "wall seconds: $SECONDS"; exit $rc' timed)

# Build the CPU and CUDA libraries for sm_90 (H100/H200).
if [[ -z $(command -v nvcc || true) && -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
GEN=()
if command -v ninja >/dev/null; then GEN=(-G Ninja); fi
say "nvcc: $(command -v nvcc || echo 'not found'); cmake: $(cmake --version | head -1)"
step configure 30 cmake -S . -B build/gpu ${GEN[@]+"${GEN[@]}"} -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=Release -DKC_BUILD_CUDA_BUGS=ON
step build 120 cmake --build build/gpu --parallel
export KERNELCHECK_NATIVE_DIR=$ROOT/build/gpu
ls -l build/gpu/*.so 2>/dev/null || say "WARNING: no library in build/gpu"

step nvidia_smi 15 nvidia-smi
step doctor 20 "${KC[@]}" doctor

# The suite's tests that need a GPU (skipped on CPU machines): the kernel against a
# float64 reference, bitwise invariance (batch, alignment, stride, grid cap), the gold on
# the GPU, and the candidate's probe (test_honest.py runs on CPU tensors: a smoke test).
step pytest_cuda 75 "$PY" -m pytest -p no:cacheprovider -q -rs \
    tests/native/test_cuda_kernel.py tests/candidates/test_native_candidates.py tests/candidates/test_honest.py \
    "tests/test_gold.py::test_gold_device_is_a_parameter"

# compute-sanitizer (--sanitize): the planted-bug kernels (tests/fixtures/cuda_bugs/, built
# above into build/gpu/cuda_bugs/) must fail memory_safety under memcheck and racecheck, the
# cuda kernel must pass; the sanitizer's own words are in steps.log when it refuses the GPU.
if [[ -z $(command -v compute-sanitizer || true) && -x /usr/local/cuda/bin/compute-sanitizer ]]; then
    export PATH=$PATH:/usr/local/cuda/bin
fi
say "compute-sanitizer: $(command -v compute-sanitizer || echo 'not found')"
step sanitizer_probe 30 compute-sanitizer --tool memcheck "$PY" -c \
    'import torch; x = torch.ones(4, device="cuda"); print("sanitizer ok", float(x.sum()))'
step pytest_sanitize 240 env KERNELCHECK_CUDA_BUGS_DIR="$ROOT/build/gpu/cuda_bugs" \
    "$PY" -m pytest -p no:cacheprovider -q -rs tests/native/test_cuda_bugs.py

# The default logp grid, forward and backward, torch and the CUDA kernel.
step run_grid 90 "${KC[@]}" run --op logp --device cuda --check-grad \
    --candidate torch --candidate cuda --json-out "$OUT/run.json" --format plain
# Real-world negative controls (scripts/gpu_controls.toml: PyTorch's own CUDA reductions),
# judged at 8 x 151936 (few long rows); then every failure's printed repro is rerun and must fail again.
step controls 60 "${KC[@]}" run --op logp --device cuda --spec scripts/gpu_controls.toml \
    --candidate plain-torch-cuda --candidate log-softmax-cuda --dtype fp32,bf16 \
    --shape batch=8,vocab=151936 --no-shrink \
    --json-out "$OUT/controls.json" --format plain
step repros 300 "$PY" scripts/check_repros.py "$OUT/controls.json" --limit 3 --timeout 90 \
    --expect-failures
# The Qwen3 case of the CPU benchmark (16 x 256 rows at V=151936, 3 dtypes, torch and
# cuda) with the float64 gold on the GPU, timed; phase_seconds in the JSON says where
# the time went (the gold phase runs on the GPU there).
step run_qwen3 140 "${TIMED[@]}" "${KC[@]}" run --op logp --device cuda \
    --candidate torch --candidate cuda --batch 16 --seq 256 --vocab 151936 --no-shrink \
    --json-out "$OUT/run_qwen3.json" --format plain
step bench 60 "${KC[@]}" bench --op logp --device cuda --candidate torch --candidate cuda \
    --batch 4096 --vocab 151936 --dtype bf16,fp32 --format json --json-out "$OUT/bench.json"
# A Qwen-vocab case at 4096 rows with gradients; one seed (the JSON report is rewritten
# as results complete, so a timeout still returns some).
step run_big 90 "${KC[@]}" run --op logp --device cuda --check-grad \
    --candidate torch --candidate cuda --batch 4096 --vocab 151936 --dtype bf16,fp32 --seed 0 \
    --json-out "$OUT/run_big.json" --format plain

say "done; exit codes:"
cat "$OUT/exit_codes.txt"
