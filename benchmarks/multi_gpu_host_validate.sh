#!/usr/bin/env bash
# On a fresh 2-GPU host, in one device call (at most about 9.5 minutes, usually 6 to 8):
# `shapelint calibrate` as a user runs it (the one-GPU measurements, the collectives and
# the parallel host probe), then held-out sets 1 and 2 measured on the same host, then
# FSDP2 with and without bf16 mixed precision on a GPU-bound Llama-3.2-1B shape. Priced
# afterwards on the CPU: python benchmarks/multi_gpu_host_check.py FOLDER --profile calibrated=FOLDER/calibrated.yaml
#
#   OUT=/some/folder bash benchmarks/multi_gpu_host_validate.sh
#
# Six files under $OUT (the device returns few): calibrated.yaml, calibrate.log,
# set1/multi_gpu_bench.json, set2/multi_gpu_bench.json, fsdp_mp_bench.json, run.log.
set -uo pipefail
OUT=${OUT:-.}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p "$OUT/set1" "$OUT/set2"
TMP=$(mktemp -d)
RUN="python -m torch.distributed.run --standalone --nproc_per_node 2"
STEP="benchmarks/multi_gpu_step.py --skip collectives,contention,dtensor --rounds 3 --steps 6"
quiet() { grep -v "Warning\|return inner\|OMP_NUM_THREADS\|^\*\*\*\*"; }
{
date -u +"calibrate from %H:%M:%S"
timeout 280 python -m shapelint calibrate -o "$OUT/calibrated.yaml" --world-size 2 2>&1 | quiet > "$OUT/calibrate.log"
echo "calibrate exit ${PIPESTATUS[0]}"; grep -i "host probe\|host speed\|wrote" "$OUT/calibrate.log"
grep -A7 "host_us:" "$OUT/calibrated.yaml"
date -u +"set 1 from %H:%M:%S"
timeout 110 $RUN $STEP --models qwen2_0_5b,pythia_410m,bert_large --modes none,ddp,fsdp,tp_pmi --out "$TMP/s1" 2>&1 | quiet | tail -12
cp "$TMP/s1/multi_gpu_bench.json" "$OUT/set1/"
date -u +"set 2 from %H:%M:%S"
timeout 110 $RUN $STEP --models pythia_160m,tinyllama_1_1b,qwen3_0_6b --modes none,ddp,fsdp,tp_pmi --out "$TMP/s2" 2>&1 | quiet | tail -12
cp "$TMP/s2/multi_gpu_bench.json" "$OUT/set2/"
date -u +"fsdp_mp from %H:%M:%S"
timeout 80 $RUN $STEP --models llama1b --modes none,fsdp,fsdp_mp --batch 16 --out "$TMP/mp" 2>&1 | quiet | tail -6
cp "$TMP/mp/multi_gpu_bench.json" "$OUT/fsdp_mp_bench.json"
date -u +"done %H:%M:%S"
} 2>&1 | tee "$OUT/run.log"
