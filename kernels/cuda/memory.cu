/* kernels/cuda/memory.cu: the process's device memory as nvidia-smi counts it, the hard cap on it
 * (set_mem_cap), the fixed overhead the planner subtracts (mem_overhead), and the scratch a step
 * needs (scratch_need, scratch_reserve); contracts in kernels/backend.h.
 *
 * Where the figure comes from, best first (cuda_impl.mem_src):
 *   MEM_NVML_PID     NVML's used memory of this pid on the device (what nvidia-smi prints in its
 *                    process table): context, modules, library handles and workspaces, NCCL's
 *                    buffers and every allocation at the driver's page size, all included.
 *   MEM_NVML_DEVICE  NVML cannot name this process (a container's pid namespace): the device's used
 *                    memory less what was used before this backend made its context. True when no
 *                    other process allocates on the device meanwhile.
 *   MEM_CUDART       no NVML (libnvidia-ml.so.1 not found): cudaMemGetInfo's used memory less what
 *                    was used right after the context was made; the context itself is not seen
 *                    (a one-line note says so when a cap is set).
 * NVML is loaded with dlopen (it ships with the driver, not the toolkit); nothing links it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

/* ---------------------------------------------------------------------------- NVML, by dlopen */

/* the few NVML types used (the public NVML API, nvml.h: nvmlMemory_t and the process info of the
 * _v2 / _v3 process queries) */
typedef int nvml_ret;
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_proc {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};
constexpr nvml_ret NVML_OK = 0, NVML_INSUFFICIENT_SIZE = 7;
constexpr unsigned long long NVML_NOT_AVAILABLE = ~0ULL;

static struct {
    bool ok;
    nvml_ret (*init)(void);
    nvml_ret (*by_bus)(const char *, void **);
    nvml_ret (*meminfo)(void *, nvml_memory *);
    nvml_ret (*procs)(void *, unsigned int *, nvml_proc *);
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    *(void **)&nv.init = dlsym(h, "nvmlInit_v2");
    *(void **)&nv.by_bus = dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&nv.meminfo = dlsym(h, "nvmlDeviceGetMemoryInfo");
    *(void **)&nv.procs = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!nv.procs) *(void **)&nv.procs = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v2");
    nv.ok = nv.init && nv.by_bus && nv.meminfo && nv.init() == NVML_OK;
}

/* NVML's used memory of process `pid` on dev; false when NVML does not list it (or cannot say) */
static bool nv_pid_used(void *dev, unsigned int pid, size_t *used) {
    if (!nv.procs) return false;
    std::vector<nvml_proc> ps(64);
    for (int tries = 0; tries < 4; tries++) {
        unsigned int n = (unsigned int)ps.size();
        nvml_ret r = nv.procs(dev, &n, ps.data());
        if (r == NVML_INSUFFICIENT_SIZE) {
            ps.resize((size_t)n + 64);
            continue;
        }
        if (r != NVML_OK) return false;
        for (unsigned int i = 0; i < n; i++)
            if (ps[i].pid == pid && ps[i].used != NVML_NOT_AVAILABLE) {
                *used = (size_t)ps[i].used;
                return true;
            }
        return false;
    }
    return false;
}

static bool nv_dev_used(void *dev, size_t *used) {
    nvml_memory m;
    if (!dev || nv.meminfo(dev, &m) != NVML_OK) return false;
    *used = (size_t)m.used;
    return true;
}

static size_t rt_used(int device) {
    size_t fr = 0, tot = 0;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != device) cudaSetDevice(device); /* a sampler's own thread */
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return tot - fr;
}

/* ---------------------------------------------------------------------------- probes */

void mem_probe_start(int device, mem_probe *mp) {
    mp->nvml_dev = nullptr;
    mp->used_before = 0;
    pthread_once(&nv_once, nv_load);
    if (!nv.ok) return;
    char bus[64];
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess) { /* no context needed */
        cudaGetLastError();
        return;
    }
    void *dev = nullptr;
    size_t used = 0;
    if (nv.by_bus(bus, &dev) != NVML_OK || !nv_dev_used(dev, &used)) return;
    mp->nvml_dev = dev;
    mp->used_before = used;
}

void mem_probe_context(cuda_impl *I, const mem_probe *mp) {
    I->nvml_dev = mp->nvml_dev;
    if (cudaFree(nullptr) != cudaSuccess) cudaGetLastError(); /* the context exists from here (NVML lists the pid) */
    if (mp->nvml_dev) {
        I->mem_src = MEM_NVML_DEVICE;
        I->base_used = mp->used_before;
        size_t u;
        if (nv_pid_used(mp->nvml_dev, (unsigned int)getpid(), &u)) I->mem_src = MEM_NVML_PID;
    } else {
        I->mem_src = MEM_CUDART;
        I->base_used = rt_used(I->device);
    }
}

size_t process_bytes(cuda_impl *I) {
    size_t u = 0;
    if (I->mem_src == MEM_NVML_PID && nv_pid_used(I->nvml_dev, (unsigned int)getpid(), &u)) return u;
    if (I->mem_src != MEM_CUDART && nv_dev_used(I->nvml_dev, &u)) return u > I->base_used ? u - I->base_used : 0;
    u = rt_used(I->device);
    return u > I->base_used ? u - I->base_used : 0;
}

/* the overhead seen now (the process less what alloc and scratch hold), kept when it is the most */
static size_t overhead_now(cuda_impl *I, size_t proc) {
    size_t o = proc > I->in_use ? proc - I->in_use : 0;
    if (o > I->overhead) I->overhead = o;
    return I->overhead;
}

void mem_probe_end(cuda_impl *I) { overhead_now(I, process_bytes(I)); }

static const char *src_name(int s) {
    return s == MEM_NVML_PID ? "NVML, this process" : s == MEM_NVML_DEVICE ? "NVML, the device's used memory less what "
                                                                             "was used before glmtune started"
                                                                           : "cudaMemGetInfo; the CUDA context not counted";
}

constexpr size_t PAGE = 2u << 20; /* the driver maps large allocations in 2 MiB pages */

glm_status cap_check(cuda_impl *I, size_t bytes, const char *what) {
    if (!I->cap) return GLM_OK;
    const size_t proc = process_bytes(I), need = (bytes + PAGE - 1) / PAGE * PAGE;
    overhead_now(I, proc);
    if (proc + need <= I->cap) return GLM_OK;
    const double G = 1073741824.0;
    return glm_err(GLM_ERR_NOMEM,
                   "cuda backend: %.2f GiB for %s would take this process past --max-gpu-memory %.2f GiB: it holds %.2f "
                   "GiB on device %d (%.2f GiB of buffers, %.2f GiB of CUDA context, library handles and workspaces; "
                   "measured by %s); hint: --quantization-bit 4, a shorter --seq-len, --gradient-checkpointing auto or "
                   "full, --context-parallel N, or a larger --max-gpu-memory (glmtune train --dry-run prints the plan)",
                   bytes / G, what ? what : "a buffer", I->cap / G, proc / G, I->device, I->in_use / G,
                   (proc > I->in_use ? proc - I->in_use : 0) / G, src_name(I->mem_src));
}

/* ---------------------------------------------------------------------------- the op table's entries */

static size_t cu_mem_process(const glm_backend *be) { return process_bytes(IMPL(be)); }

/* held back beside the overhead measured: what loads lazily once steps run (the GEMM kernels cuBLASLt
 * picks for the step's shapes, glmtune's own kernels' modules, NCCL's connections on first use) */
constexpr size_t LAZY_RESERVE = 256u << 20;

static size_t cu_mem_overhead(const glm_backend *be) {
    cuda_impl *I = IMPL(be);
    return overhead_now(I, process_bytes(I)) + LAZY_RESERVE;
}

static glm_status cu_set_mem_cap(const glm_backend *be, size_t bytes) {
    cuda_impl *I = IMPL(be);
    I->cap = bytes;
    if (!bytes) return GLM_OK;
    static bool noted;
    if (I->mem_src == MEM_CUDART && !noted) {
        noted = true;
        fprintf(stderr, "glmtune: note: NVML (libnvidia-ml.so.1) not found: the memory cap counts what cudaMemGetInfo "
                        "sees used since the CUDA context was made, not the context itself\n");
    }
    const size_t proc = process_bytes(I);
    overhead_now(I, proc);
    if (proc > bytes)
        return glm_err(GLM_ERR_NOMEM, "cuda backend: the process already holds %.2f GiB on device %d, more than the cap "
                       "of %.2f GiB (--max-gpu-memory); hint: a larger --max-gpu-memory", proc / 1073741824.0, I->device,
                       bytes / 1073741824.0);
    return GLM_OK;
}

constexpr size_t SUMSQ_SCRATCH = 1024 * 8; /* optim.cu: SUMSQ_BLOCKS doubles */

/* every slot's bytes for shape s (ws: cuDNN's workspace, in slot[SCR_CUDNN_WS] too) */
static glm_status slots_for(cuda_impl *I, const glm_scratch_shape *s, size_t slot[SCR_COUNT], size_t *ws) {
    if (s->B < 0 || s->T < 0 || s->H < 0 || s->Hkv < 0 || s->Dh < 0 || s->loss_rows < 0 || s->widen_a < 0 ||
        s->widen_b < 0 || s->gemm_f32 < 0 || s->comm_doubles < 0 || s->cp_block < 0)
        return glm_err(GLM_ERR_ARG, "scratch_need: negative sizes (B %d, T %d, H %d)", s->B, s->T, s->H);
    for (int i = 0; i < SCR_COUNT; i++) slot[i] = 0;
    *ws = 0;
    slot[SCR_WIDEN_A] = (size_t)s->widen_a * 4;
    slot[SCR_WIDEN_B] = (size_t)s->widen_b * 4;
    slot[SCR_GEMM_F32] = (size_t)s->gemm_f32 * 4;
    slot[SCR_REDUCE] = std::max((size_t)s->loss_rows * 8, SUMSQ_SCRATCH);
    slot[SCR_COMM] = (size_t)s->comm_doubles * 8;
    if (s->fp8) { /* fp8.cu's blocks: codes, scales, the f32 tile (GLM_FP8_SCRATCH_BYTES) */
        slot[SCR_FP8_Q] = (size_t)GLM_FP8_BLOCK_BYTES;
        slot[SCR_FP8_VEC] = 2u << 20;
        slot[SCR_FP8_TILE] = (size_t)GLM_FP8_BLOCK_BYTES;
    }
    if (s->B > 0 && s->T > 0 && s->H > 0) GLM_TRY(attn_scratch_need(I, s, slot, ws));
    return GLM_OK;
}

static glm_status cu_scratch_need(const glm_backend *be, const glm_scratch_shape *s, size_t *bytes, size_t *attn_ws) {
    size_t slot[SCR_COUNT], ws = 0, sum = 0;
    GLM_TRY(slots_for(IMPL(be), s, slot, &ws));
    for (int i = 0; i < SCR_COUNT; i++) sum += slot[i];
    *bytes = sum;
    if (attn_ws) *attn_ws = ws;
    return GLM_OK;
}

static glm_status cu_scratch_reserve(const glm_backend *be, const glm_scratch_shape *s, int with_attn_ws) {
    cuda_impl *I = IMPL(be);
    size_t slot[SCR_COUNT], ws = 0;
    GLM_TRY(slots_for(I, s, slot, &ws));
    if (!with_attn_ws) slot[SCR_CUDNN_WS] = 0;
    for (int i = 0; i < SCR_COUNT; i++) {
        if (slot[i]) GLM_TRY(scratch_exact(I, i, slot[i]));
    }
    return GLM_OK;
}

void mem_ops(glm_backend *b) {
    b->mem_process = cu_mem_process;
    b->mem_overhead = cu_mem_overhead;
    b->set_mem_cap = cu_set_mem_cap;
    b->scratch_need = cu_scratch_need;
    b->scratch_reserve = cu_scratch_reserve;
}

}  // namespace glmcu
