#!/bin/bash
# tests/gpu/profile_attn.sh: Nsight Compute on the attention kernels (GPU machine, .device/gpu
# carried): one launch of each of k_fa_fwd, k_fa_dq, k_fa_dkdv at T = 8192 (bench_cuda's first
# attention case), with the sections that say where the time goes (speed of light, occupancy,
# warp stall reasons, scheduler, pipes, memory). Report and text to $OUT.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/glm-prof}
mkdir -p "$out"
. "$root/tests/gpu/env.sh" # LD_LIBRARY_PATH: staged libraries, CUDA, the wheels' libraries
# glmtune's own kernels are what is profiled: whole rows would otherwise go to cuDNN
export GLMTUNE_ATTENTION=glmtune
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 0; }
tag=${GLM_PROF_TAG:-$(basename "$pre")}
timeout 300 "$ncu" --kernel-name regex:'k_fa_' --launch-count ${GLM_PROF_LAUNCHES:-3} \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section InstructionStats \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed.sum \
  -o "$out/attn_$tag" -f "$pre/bin/bench_cuda" attention >"$out/ncu_run_$tag.log" 2>&1
echo "ncu exit $?"
"$ncu" --import "$out/attn_$tag.ncu-rep" --page details >"$out/attn_$tag.txt" 2>&1
grep -E 'k_fa_|stalled|hmma|bank_conflicts|wavefronts|inst_executed.sum|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|Executed Ipc A|Pipe' "$out/attn_$tag.txt" | head -120
