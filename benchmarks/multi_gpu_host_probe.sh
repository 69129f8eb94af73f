#!/usr/bin/env bash
# On one 2-GPU host, in one device call (about 6 minutes): the parallel host probe that
# `shapelint calibrate` runs (shapelint/measure/parallel_host_worker.py) before and after
# the held-out sets 1 and 2 (benchmarks/multi_gpu_estimate.py --heldout), and calibrate's
# one-GPU eager host probe, so that the probe's prediction of this host's host-bound
# steps can be checked on the CPU afterwards (benchmarks/multi_gpu_host_check.py):
#
#   OUT=/some/folder bash benchmarks/multi_gpu_host_probe.sh
#
# $OUT/probe_before.json, $OUT/probe_after.json: the probe's steps (ms per step, per
# variant and layout); $OUT/one_gpu_host_speed.json: calibrate's one-GPU host speed
# against h200; $OUT/set1/, $OUT/set2/: multi_gpu_step.py's steps and their estimate on h200.
set -uo pipefail
OUT=${OUT:-.}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p "$OUT/set1" "$OUT/set2"
RUN="python -m torch.distributed.run --standalone --nproc_per_node 2"
timeout 150 $RUN -m shapelint.measure.parallel_host_worker "$OUT/probe_before.json" 2>&1 | grep -v Warning | tee "$OUT/probe_before.log"
OUT="$OUT/set1" timeout 170 $RUN benchmarks/multi_gpu_estimate.py --measure --heldout 1 --gpu h200 \
    --rounds 3 --steps 6 2>&1 | grep -v "Warning\|return inner" | tee "$OUT/set1/heldout.log"
OUT="$OUT/set2" timeout 170 $RUN benchmarks/multi_gpu_estimate.py --measure --heldout 2 --gpu h200 \
    --rounds 3 --steps 6 2>&1 | grep -v "Warning\|return inner" | tee "$OUT/set2/heldout.log"
timeout 150 $RUN -m shapelint.measure.parallel_host_worker "$OUT/probe_after.json" 2>&1 | grep -v Warning | tee "$OUT/probe_after.log"
timeout 90 python - "$OUT/one_gpu_host_speed.json" <<'PY' 2>&1 | tail -3
import json, sys
from shapelint.hardware import resolve
from shapelint.measure.calibrate import host_speed
speed = host_speed(False, resolve("h200"))
print(f"one-GPU eager host speed against h200: {speed}")
json.dump({"eager_host_speed_against_h200": speed}, open(sys.argv[1], "w"))
PY
ls -R "$OUT"
