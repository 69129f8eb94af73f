#!/usr/bin/env bash
# The out-of-sample 2-GPU check and the collectives calibration, in one device call
# (about 4 minutes on 2xH100), from the repository root:
#
#   OUT=/some/folder bash benchmarks/multi_gpu_heldout.sh [extra multi_gpu_step.py flags]
#
# 1. DDP 2, FSDP2 2 and TP 2 eager steps of the held-out models (benchmarks/heldout_models/)
#    measured and priced on the shipped h100 profile: $OUT/heldout.log,
#    $OUT/multi_gpu_bench.json, $OUT/multi_gpu_estimate_heldout.json;
# 2. shapelint calibrate --collectives-only: this machine's NCCL table into
#    $OUT/calibrated_collectives.yaml (the h100 profile otherwise), $OUT/calibrate.log.
# Pricing the same measurements on the calibrated profile needs no GPU (the command is
# printed at the end: run it where the files come back).
set -uo pipefail
OUT=${OUT:-.}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
python -m torch.distributed.run --standalone --nproc_per_node 2 benchmarks/multi_gpu_estimate.py \
    --measure --heldout --rounds 4 --steps 8 --out "$OUT" "$@" 2>&1 | tee "$OUT/heldout.log"
step1=$?
python -m shapelint calibrate --collectives-only -o "$OUT/calibrated_collectives.yaml" 2>&1 | tee "$OUT/calibrate.log"
step2=$?
echo "exit: heldout $step1, calibrate $step2"
echo "then, on any machine: python benchmarks/multi_gpu_estimate.py --from FOLDER/multi_gpu_bench.json --heldout" \
     "--gpu-profile FOLDER/calibrated_collectives.yaml --out FOLDER/calibrated"
