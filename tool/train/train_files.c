/* tool/train/train_files.c: the output directory, resume and --dry-run side of `glmtune train`
 * (tool/train/train_files.h, tool/train/train.h). */
#define _GNU_SOURCE
#include "tool/train/train_files.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/log.h"
#include "common/pyjson.h"
#include "dataset/loader.h"
#include "kernels/backend.h"
#include "kernels/comm.h"
#include "lora/io/checkpoint.h"
#include "lora/model/comm_plan.h"
#include "lora/model/config.h"
#include "lora/adapter/lora.h"
#include "tool/train/metrics.h"
#include "lora/model/model.h"
#include "lora/model/plan.h"

/* A fresh run refuses an output directory that holds an earlier run (its checkpoints and metrics
 * would mix with the new ones), unless --overwrite-output-dir clears them. A resumed run checks
 * that its checkpoint exists (train_resume_path's errors), before anything loads or is created. */
glm_status train_check_seq_len(const glm_loader *l, const char *what, int64_t want_seq_len) {
    if (want_seq_len > 0 && (int64_t)l->T != want_seq_len)
        return glm_err(GLM_ERR_MISMATCH, "%s: the shards have rows of %u tokens, but the settings ask for seq_len %lld; "
                       "hint: re-run glmtune tokenize --seq-len %lld, or drop the seq_len/cutoff_len setting",
                       what, l->T, (long long)want_seq_len, (long long)want_seq_len);
    return GLM_OK;
}

glm_base_format train_base_format(const train_settings *ts) {
    glm_base_format bf = {0, GLM_WF_NF4, 0, ts->fp8};
    if (ts->quant_bits == 4) {
        bf.quant_bits = 4;
        bf.q4 = ts->quant_type && !strcmp(ts->quant_type, "fp4") ? GLM_WF_FP4 : GLM_WF_NF4;
        bf.double_quant = ts->double_quant;
    }
    return bf;
}

glm_plan_request train_plan_request(const train_settings *ts, const glm_config *cfg, const glm_lora_info *li, int B,
                                    int T, int world, int cp, const glm_backend *be, int local_ranks) {
    return (glm_plan_request){.cfg = cfg, .lora = li, .B = B, .T = T, .backward = 1, .mode = (glm_ckpt_mode)ts->ckpt_mode,
                              .fmt = train_base_format(ts), .opts = train_model_options(ts, cp, NULL), .world = world,
                              .shard_world = glm_shard_world(ts->opt.shard_base, world), .local_ranks = local_ranks,
                              .be = be, .describe_cuda = !be};
}

glm_model_options train_model_options(const train_settings *ts, int cp, const glm_backend *cp_comm) {
    return (glm_model_options){.max_bytes = ts->max_gpu_gib > 0 ? ts->max_gpu_gib * 1073741824.0 : 0, .optimizer = 1,
                               .cp = cp > 1 ? cp : 0, .cp_comm = cp > 1 ? cp_comm : NULL};
}

/* The output directory (or, when it does not exist yet, the nearest directory above it, where it will be
 * made) must be writable: checkpoints, metrics and the adapter go there. Said before the model loads. */
static glm_status check_writable(const char *out, bool resume) {
    char *p = strdup(out);
    if (!p) return glm_err(GLM_ERR_NOMEM, "out of memory");
    while (!glm_is_dir(p)) { /* the nearest existing directory above */
        char *sl = strrchr(p, '/');
        if (!sl) {
            strcpy(p, ".");
            break;
        }
        if (sl == p) sl[1] = 0;
        else *sl = 0;
        if (!strcmp(p, "/")) break;
    }
    glm_status s = GLM_OK;
    if (access(p, W_OK | X_OK) != 0) {
        int e = errno;
        char where[600];
        if (!strcmp(p, out)) snprintf(where, sizeof where, "--output-dir %s", out);
        else snprintf(where, sizeof where, "%s (where --output-dir %s would be made)", p, out);
        if (resume)
            s = glm_err(GLM_ERR_IO, "%s is not writable (%s): the resumed run writes its checkpoints, metrics and final "
                        "adapter there; hint: make it writable (chmod u+w, or a read-write mount), or resume into "
                        "another directory: --output-dir NEW --resume-from-checkpoint %s/checkpoint-N", where, strerror(e),
                        out);
        else
            s = glm_err(GLM_ERR_IO, "%s is not writable (%s): the run writes its checkpoints, metrics and adapter there; "
                        "hint: choose a writable --output-dir, or make it writable", where, strerror(e));
    }
    free(p);
    return s;
}

glm_status train_check_output_dir(const train_settings *ts) {
    GLM_TRY(check_writable(ts->opt.output_dir, ts->resume != NULL));
    if (ts->resume) { /* the checkpoint must exist: said now, before the model loads */
        char *path = NULL;
        glm_status s = train_resume_path(ts, &path);
        free(path);
        return s;
    }
    char *ckpt = NULL, *metrics = glm_path_join(ts->opt.output_dir, "metrics.jsonl");
    int64_t step = -1;
    glm_status s = glm_is_dir(ts->opt.output_dir) ? glm_ckpt_latest(ts->opt.output_dir, &ckpt, &step) : GLM_OK;
    char *tstate = glm_path_join(ts->opt.output_dir, "trainer_state.json");
    bool earlier = s == GLM_OK && (ckpt || glm_is_file(metrics) || glm_is_file(tstate));
    free(tstate);
    if (earlier && !ts->opt.overwrite_output_dir) {
        s = glm_err(GLM_ERR_ARG, "%s holds an earlier run (%s); hint: --resume-from-checkpoint to continue it, "
                    "--overwrite-output-dir to start afresh there, or another --output-dir", ts->opt.output_dir,
                    ckpt ? ckpt : "metrics.jsonl");
    } else if (earlier) {
        DIR *d = opendir(ts->opt.output_dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, "checkpoint-", 11) && strcmp(e->d_name, "metrics.jsonl") &&
                strcmp(e->d_name, "runs") && strcmp(e->d_name, "loss_curve.svg") &&
                strcmp(e->d_name, "trainer_state.json") && strcmp(e->d_name, "adapter_config.json") &&
                strcmp(e->d_name, "adapter_model.safetensors"))
                continue;
            char *p = glm_path_join(ts->opt.output_dir, e->d_name);
            glm_rmtree(p);
            free(p);
        }
        if (d) closedir(d);
        glm_log_info("--overwrite-output-dir: removed the earlier run's checkpoints and metrics in %s", ts->opt.output_dir);
    }
    free(ckpt);
    free(metrics);
    return s;
}

glm_status train_init_adapter_path(const char *given, char **path) {
    *path = NULL;
    if (!glm_is_dir(given))
        return glm_err(GLM_ERR_IO, "--init-adapter %s: %s; hint: a PEFT adapter directory (adapter_config.json + "
                       "adapter_model.safetensors), a checkpoint-N, or the --output-dir of a glmtune train run", given,
                       glm_is_file(given) ? "a file, not a directory" : "no such directory");
    char *cfg = glm_path_join(given, "adapter_config.json"), *st = glm_path_join(given, "adapter_model.safetensors");
    char *ts = glm_path_join(given, "trainer_state.json");
    bool adapter = cfg && st && glm_is_file(cfg) && glm_is_file(st);
    bool run = ts && glm_is_file(ts) && !glm_ckpt_is_dir(given); /* an output directory, not a checkpoint-N */
    free(cfg);
    free(st);
    free(ts);
    if (adapter) {
        if (run) glm_log_info("--init-adapter %s: a training run's output directory: its final adapter (adapter_config.json, "
                              "adapter_model.safetensors there)", given);
        *path = strdup(given);
        return *path ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    int64_t step = -1;
    GLM_TRY(glm_ckpt_latest(given, path, &step));
    if (!*path)
        return glm_err(GLM_ERR_IO, "--init-adapter %s holds no adapter (adapter_config.json + adapter_model.safetensors) "
                       "and no complete checkpoint-N; hint: a PEFT adapter directory (glmtune export-adapter writes one), "
                       "a checkpoint-N, or the --output-dir of a glmtune train run", given);
    glm_log_info("--init-adapter %s: a training run's output directory without a final adapter: its newest checkpoint, %s "
                 "(step %lld)", given, *path, (long long)step);
    return GLM_OK;
}

/* A checkpoint another trainer wrote (transformers' Trainer, LLaMA-Factory): an adapter and a
 * trainer_state.json, but neither glmtune's checksums.txt nor its glmtune_state.json. */
static bool foreign_checkpoint(const char *dir) {
    static const char *const has[] = {"adapter_model.safetensors", "trainer_state.json"},
                             *const lacks[] = {GLM_CKPT_CHECKSUMS, "glmtune_state.json"};
    bool yes = true;
    for (int i = 0; i < 4 && yes; i++) {
        char *p = glm_path_join(dir, i < 2 ? has[i] : lacks[i - 2]);
        yes = p && glm_is_file(p) == (i < 2);
        free(p);
    }
    return yes;
}

/* Resolves --resume-from-checkpoint: "" or "latest" -> the newest checkpoint of output_dir;
 * a checkpoint directory; or another output directory (its newest checkpoint). */
glm_status train_resume_path(const train_settings *ts, char **path) {
    const char *r = ts->resume;
    int64_t step;
    const char *dir = r;
    if (!*r || !strcmp(r, "latest") || !strcmp(r, "true")) {
        dir = ts->opt.output_dir;
    } else {
        if (glm_ckpt_is_dir(r)) {
            *path = strdup(r);
            return GLM_OK;
        }
        if (glm_is_file(r))
            return glm_err(GLM_ERR_ARG, "--resume-from-checkpoint: %s is a file, not a directory; hint: give a checkpoint-N "
                           "directory or the output directory of the run to continue", r);
        if (glm_is_dir(r) && foreign_checkpoint(r))
            return glm_err(GLM_ERR_ARG, "--resume-from-checkpoint: %s is not a glmtune checkpoint (no glmtune_state.json): "
                           "a transformers or LLaMA-Factory one, whose optimizer state glmtune cannot continue; "
                           "hint: use --init-adapter %s to start from its adapter", r, r);
        const char *base = strrchr(r, '/');
        base = base && base[1] ? base + 1 : r;
        if (glm_is_dir(r) && !strncmp(base, "checkpoint-", 11)) { /* a checkpoint that is not whole: say why */
            GLM_TRY(glm_ckpt_verify(r));
        }
    }
    if (!glm_is_dir(dir))
        return glm_err(GLM_ERR_IO, "--resume-from-checkpoint: %s does not exist%s; hint: give a checkpoint-N directory "
                       "or the output directory of the run to continue, or start afresh without "
                       "--resume-from-checkpoint", dir, dir == ts->opt.output_dir ? " (the output directory)" : "");
    GLM_TRY(glm_ckpt_latest(dir, path, &step));
    if (!*path)
        return glm_err(GLM_ERR_ARG, "--resume-from-checkpoint: no complete checkpoint in %s; hint: give a checkpoint-N "
                       "directory, or start afresh without --resume-from-checkpoint (with --overwrite-output-dir "
                       "when the directory holds an earlier run)", dir);
    return GLM_OK;
}

/* Resuming with other settings than the checkpoint's is allowed but said, setting by setting. */
void train_warn_changed_settings(const json_t *saved, const json_t *now) {
    static const char *const keys[] = {
        "model", "data", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
        "lr_scheduler_type", "warmup_steps", "warmup_ratio", "min_lr", "weight_decay", "adam_beta1", "adam_beta2",
        "adam_epsilon", "max_grad_norm", "num_train_epochs", "max_steps", "seed", "lora_rank", "lora_alpha",
        "lora_dropout", "lora_target", "use_rslora", "seq_len", "rope_theta", "rope_inv_freq_dtype", "loraplus_lr_ratio",
        "min_lr_rate", "optim", "quantization_bit", "base_dtype"};
    if (!json_is_object(saved) || !json_is_object(now)) return;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *a = json_object_get(saved, keys[i]), *b = json_object_get(now, keys[i]);
        if (!a || !b || json_equal(a, b)) continue;
        char *sa = glm_tojson(a, -1), *sb = glm_tojson(b, -1); /* 0.005, not 0.0050000000000000001 */
        glm_log_warn("resuming with %s = %s; the checkpoint was trained with %s", keys[i], sb ? sb : "?", sa ? sa : "?");
        free(sa);
        free(sb);
    }
}

/* loss_curve.svg in the output directory from the logged history (train and eval loss). */
glm_status train_plot_history(const json_t *hist, const char *dir) {
    size_t n = json_array_size(hist), nt = 0, ne = 0;
    int64_t *ts_ = malloc(sizeof(int64_t) * (n + 1)), *es = malloc(sizeof(int64_t) * (n + 1));
    double *tl = malloc(sizeof(double) * (n + 1)), *el = malloc(sizeof(double) * (n + 1));
    if (!ts_ || !es || !tl || !el) {
        free(ts_), free(es), free(tl), free(el);
        return glm_err(GLM_ERR_NOMEM, "out of memory (loss curve)");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *r = json_array_get(hist, i);
        int64_t step = json_integer_value(json_object_get(r, "step"));
        if (json_object_get(r, "loss")) ts_[nt] = step, tl[nt++] = json_number_value(json_object_get(r, "loss"));
        if (json_object_get(r, "eval_loss")) es[ne] = step, el[ne++] = json_number_value(json_object_get(r, "eval_loss"));
    }
    char *p = glm_path_join(dir, "loss_curve.svg");
    glm_status s = glm_plot_loss_svg(p, ts_, tl, nt, es, el, ne);
    free(p);
    free(ts_);
    free(es);
    free(tl);
    free(el);
    return s;
}

/* The backend --device asks for: auto is CUDA when a GPU is present, else the CPU. */
static glm_status pick_backend(const train_settings *ts, const glm_backend **out) {
    const glm_backend *be = NULL;
#ifdef GLMTUNE_HAVE_CUDA
    int want_cuda = !strcmp(ts->device, "cuda");
    if (!strcmp(ts->device, "auto")) want_cuda = glm_cuda_device_count() > 0;
    if (want_cuda) {
        glm_status cst = GLM_OK;
        be = glm_backend_cuda(0, &cst);
        if (!be) return glm_err_context(cst, "--device %s", ts->device);
    }
#endif
    if (!be && (!strcmp(ts->device, "cpu") || !strcmp(ts->device, "auto"))) be = glm_backend_cpu();
    else if (!be)
        return glm_err(GLM_ERR_UNSUPPORTED, "--device %s: this build has only the CPU reference backend (built without "
                       "nvcc); hint: --device cpu", ts->device);
    *out = be;
    return GLM_OK;
}

glm_status train_dry_run(const train_settings *ts, int *fits) {
    glm_config cfg;
    GLM_TRY(glm_config_load(ts->opt.model, ts->opt.rope_theta, &cfg));
    if (ts->fp8) GLM_TRY(glm_fp8_dims_check(&cfg)); /* as the run refuses it */
    int64_t T = ts->opt.seq_len;
    int W = ts->dry_run_world > 1 ? ts->dry_run_world : 1, cp = ts->context_parallel > 1 ? ts->context_parallel : 1;
    if (cp > 1 && W == 1) W = cp; /* --context-parallel N alone: one group of N ranks */
    int B_plan = (int)ts->opt.per_device_train_batch_size;
    char schedule[512] = "";
    if (ts->opt.data && *ts->opt.data) {
        glm_loader l;
        GLM_TRY(glm_loader_open(&l, ts->opt.data, "train", (uint64_t)ts->opt.seed, false));
        T = l.T;
        glm_status s = train_check_seq_len(&l, ts->opt.data, ts->opt.seq_len); /* as the run refuses it */
        if (s == GLM_OK && ts->by_sample) s = glm_loader_by_document(&l);
        if (s == GLM_OK) {
            /* the run's step arithmetic (train.c setup): units per optimizer step = batch x accumulation x
             * data-parallel groups; steps per epoch = ceil(units / that), as transformers counts them */
            int dp = W % cp ? 1 : W / cp;
            uint64_t per_step = (uint64_t)(ts->opt.per_device_train_batch_size * ts->opt.gradient_accumulation_steps * dp);
            uint64_t spe = (l.n_units + per_step - 1) / per_step;
            int64_t total = ts->opt.max_steps > 0 ? ts->opt.max_steps : (int64_t)ceil(ts->opt.num_train_epochs * (double)spe);
            snprintf(schedule, sizeof schedule, "schedule: %llu %s, %llu per optimizer step, %llu steps per epoch, %lld "
                     "optimizer steps\n", (unsigned long long)l.n_units, ts->by_sample ? "samples" : "rows",
                     (unsigned long long)per_step, (unsigned long long)spe, (long long)total);
            /* a micro-batch has at most the units a data-parallel group gets (train.c plan_steps: B_eff) */
            uint64_t group = (l.n_units + (uint64_t)dp - 1) / (uint64_t)dp;
            uint64_t b = (uint64_t)B_plan < group ? (uint64_t)B_plan : group;
            if (b < (uint64_t)B_plan)
                snprintf(schedule + strlen(schedule), sizeof schedule - strlen(schedule),
                         "micro-batch: %llu %s, not per_device_train_batch_size %d: the shards hold %llu %s%s\n",
                         (unsigned long long)b, ts->by_sample ? "samples" : "rows", B_plan, (unsigned long long)group,
                         ts->by_sample ? "samples" : "rows", dp > 1 ? " per data-parallel group" : "");
            if (ts->by_sample) { /* the run's one row of B samples */
                T = (int64_t)glm_loader_longest_docs(&l, (uint32_t)b);
                B_plan = 1;
            } else {
                B_plan = (int)b;
            }
        }
        glm_loader_close(&l);
        GLM_TRY(s);
        if (ts->eval_data && *ts->eval_data && !ts->eval_from_val) { /* the run opens it: its val split, else all rows */
            glm_status ev = glm_loader_open(&l, ts->eval_data, "val", (uint64_t)ts->opt.seed, false);
            if (ev == GLM_ERR_ARG) ev = glm_loader_open(&l, ts->eval_data, "train", (uint64_t)ts->opt.seed, false);
            GLM_TRY(ev);
            glm_loader_close(&l);
        }
    }
    if (T <= 0) return glm_err(GLM_ERR_ARG, "--dry-run needs the row length: --data SHARDS or --seq-len T");
    if (W % cp)
        return glm_err(GLM_ERR_ARG, "--context-parallel %d does not divide the %d ranks of --gpus / --nproc; hint: --gpus %d "
                       "(or a multiple), or a --context-parallel that divides %d", cp, W, cp, W);
    glm_lora_config lc = {(int)ts->opt.lora_rank, (float)ts->opt.lora_alpha, (float)ts->opt.lora_dropout, ts->opt.use_rslora,
                          ts->lora_target};
    glm_lora_info li;
    GLM_TRY(glm_lora_info_for(&cfg, &lc, &li));
    /* the device the run would use: --device cpu plans host memory in fp32; cuda (or auto with a
     * GPU) plans bf16 on the GPU's free memory; without a GPU here, --max-gpu-memory names the card */
    int cpu = !strcmp(ts->device, "cpu");
#ifdef GLMTUNE_HAVE_CUDA
    int have_gpu = glm_cuda_device_count() > 0;
#else
    int have_gpu = 0;
#endif
    if (!strcmp(ts->device, "auto") && !have_gpu && !(ts->max_gpu_gib > 0)) cpu = 1;
    const glm_backend *be = NULL;
    char devname[320] = "";
    double fr_gib = 0, tot_gib = 0;
    if (cpu || have_gpu) {
        GLM_TRY(pick_backend(ts, &be));
        size_t fr = 0, tot = 0, use = 0, peak = 0;
        glm_be_mem_info(be, &fr, &tot, &use, &peak);
        fr_gib = fr / 1073741824.0;
        tot_gib = tot / 1073741824.0;
#ifdef GLMTUNE_HAVE_CUDA
        if (!strcmp(be->name, "cuda")) snprintf(devname, sizeof devname, "%s", glm_cuda_device_name(0));
#endif
        if (!devname[0]) snprintf(devname, sizeof devname, "cpu (host memory)");
    } else if (!(ts->max_gpu_gib > 0)) {
        return glm_err(GLM_ERR_ARG, "--dry-run --device %s: there is no GPU here to read the free memory from; hint: "
                       "--max-gpu-memory GiB plans for a card of that size (22 for a 24 GB card)", ts->device);
    } else {
        snprintf(devname, sizeof devname, "a CUDA GPU (none here: planned from --max-gpu-memory)");
    }
    /* the run's own request (lora/model/model_plan.h): with a device here, its free memory, the scratch
     * its backend says the step needs (cuDNN asked for its workspace) and under a cap the CUDA context
     * and library workspaces the process holds; without a GPU here, the CUDA backend described (the
     * overhead as measured on an H200, the planner's scratch estimate, the attention GLMTUNE_ATTENTION
     * asks for); on a GPU the layer inputs go to host memory when that is what makes the step fit */
    glm_plan_request rq = train_plan_request(ts, &cfg, &li, B_plan, (int)T, W, cp, be, W);
    glm_plan p;
    glm_plan_basis basis;
    glm_status ps = glm_plan_request_make(&rq, &p, &basis);
#ifdef GLMTUNE_HAVE_CUDA
    if (ps && be && !strcmp(be->name, "cuda")) glm_backend_cuda_close(be);
#endif
    GLM_TRY(ps);
    const glm_plan_opts o = basis.opts;
    const double budget = o.budget, overhead = basis.overhead;
    const int cap_below_overhead = basis.cap_below_overhead, no_attn_lib = !be && o.no_attn_lib;
    int eb = o.act_bytes;
    if (schedule[0]) printf("%s", schedule);
    printf("device: %s", devname);
    if (be) printf(" (%.1f GiB free of %.1f)", fr_gib, tot_gib);
    if (ts->max_gpu_gib > 0 && overhead)
        printf("; budget: --max-gpu-memory less %.2f GiB of CUDA context and library workspaces%s\n", overhead / 1073741824.0,
               be ? "" : " (as measured on an H200 with CUDA 13: no GPU here to ask)");
    else
        printf("%s\n", ts->max_gpu_gib > 0 ? "; budget from --max-gpu-memory" : "");
    if (cap_below_overhead)
        printf("--max-gpu-memory %g GiB is less than the CUDA context and library workspaces alone (%.2f GiB): nothing is "
               "left for the step; hint: a larger --max-gpu-memory (22 for a 24 GB card)\n", ts->max_gpu_gib,
               overhead / 1073741824.0);
    if (cpu && !have_gpu && !strcmp(ts->device, "auto"))
        printf("(no GPU here, so the plan is the CPU backend's; --max-gpu-memory G plans for a GPU of G GiB: 22 for a 24 "
               "GB card)\n");
    if (no_attn_lib) printf("attention: glmtune's kernels (GLMTUNE_ATTENTION=glmtune): no library workspace planned\n");
    printf("model: %s, %d layers, C %d, F %d, V %d; LoRA r=%d, %lld trainable parameters\n", ts->opt.model, cfg.L, cfg.C,
           cfg.F, cfg.V, li.r, (long long)li.params);
    const long long mb = (long long)ts->opt.per_device_train_batch_size, ga = (long long)ts->opt.gradient_accumulation_steps;
    if (cp > 1)
        printf("context parallel: %d ranks per row, %d data-parallel group%s (%d ranks), each rank planned as below "
               "(micro-batch %lld row%s per group; global batch %lld x %lld accumulation x %d group%s = %lld row%s)%s\n",
               cp, W / cp, W / cp > 1 ? "s" : "", W, mb, mb == 1 ? "" : "s", mb, ga, W / cp, W / cp > 1 ? "s" : "",
               mb * ga * (W / cp), mb * ga * (W / cp) == 1 ? "" : "s", ts->opt.shard_base ? "; --shard-base" : "");
    else if (W > 1)
        printf("data parallel: %d ranks, each planned as below (micro-batch %lld per rank; global batch %lld x %lld "
               "accumulation x %d ranks = %lld rows)%s\n", W, mb, mb, ga, W, mb * ga * W, ts->opt.shard_base ? "; --shard-base" : "");
    else if (ts->opt.shard_base)
        printf("--shard-base with one rank: nothing to shard (give --gpus N or --nproc N)\n");
    glm_plan_print(&p, &cfg, stdout);
    if (overhead)
        printf("predicted peak: %.2f GiB%s; with the CUDA context and library workspaces %.2f GiB as nvidia-smi counts it\n",
               p.total / 1073741824.0, p.fits ? "" : " (does not fit)", (p.total + (double)overhead) / 1073741824.0);
    else
        printf("predicted peak: %.2f GiB%s\n", p.total / 1073741824.0, p.fits ? "" : " (does not fit)");
    if (!cpu && glm_host_memory_from_env()) /* what the offload was held against */
        printf("host memory for offloading: at most %.1f GiB per rank (%.1f GiB from GLMTUNE_HOST_MEMORY_GIB less a %.1f "
               "GiB margin, shared by the %d rank%s of this run)%s\n", o.host_budget / 1073741824.0,
               glm_host_memory() / 1073741824.0, glm_host_margin() / 1073741824.0, W, W > 1 ? "s" : "",
               p.offload ? "; this plan uses it" : "");
    else if (!cpu)
        printf("host memory for offloading: at most %.1f GiB per rank (the %.1f GiB this machine has available less a "
               "%.1f GiB margin, shared by the %d rank%s of this run)%s\n", o.host_budget / 1073741824.0,
               glm_host_available() / 1073741824.0, glm_host_margin() / 1073741824.0, W, W > 1 ? "s" : "",
               p.offload ? "; this plan uses it" : "");
    if (cp > 1) { /* the longest row for this many ranks and this memory, with and without offloading */
        const double G = 1073741824.0;
        int B = (int)ts->opt.per_device_train_batch_size;
        int64_t step = 2048 * (int64_t)cp, cap = (int64_t)1 << 28;
        glm_plan best, best_off;
        glm_plan_request rg = rq, ro = rq;
        rg.B = ro.B = B;
        rg.opts.offload = -1; /* on the GPUs only */
        ro.opts.offload = 1;
        int64_t tmax = 0, tmax_off = 0;
        GLM_TRY(glm_plan_request_longest(&rg, step, cap, &tmax, &best));
        GLM_TRY(glm_plan_request_longest(&ro, step, cap, &tmax_off, &best_off));
        printf("longest row that fits %d rank%s of %.0f GiB with --context-parallel %d (micro-batch %d, gradient "
               "checkpointing %s, in steps of %lld tokens):\n", cp, cp > 1 ? "s" : "",
               ts->max_gpu_gib > 0 ? ts->max_gpu_gib : budget / G, cp, B,
               glm_ckpt_name((glm_ckpt_mode)ts->ckpt_mode), (long long)step);
        if (tmax > 0)
            printf("  %lld tokens with the layer inputs on the GPUs (%lld per rank, %.2f GiB of %.2f)\n", (long long)tmax,
                   (long long)best.N, best.total / G, budget / G);
        else
            printf("  none with the layer inputs on the GPUs: even %lld tokens need more than %.2f GiB per rank\n",
                   (long long)step, budget / G);
        if (tmax_off > 0)
            printf("  %lld tokens with the layer inputs offloaded to page-locked host memory: %.1f GiB of host memory per "
                   "rank, %.1f GiB for the %d ranks%s\n",
                   (long long)tmax_off, best_off.host / G, best_off.host * W / G, W,
                   best_off.host > o.host_budget ? " (more than the host memory planned for, see above: a machine with "
                                                   "that much)" : "");
        if (!p.fits) { /* the requested row with the fewest layer inputs offloaded that make it fit (host memory unbounded) */
            glm_plan po;
            glm_plan_request rf = rq;
            rf.B = B;
            rf.host_budget = 1e18;
            GLM_TRY(glm_plan_request_make(&rf, &po, NULL));
            printf("  %lld tokens (--seq-len) with offloading: %s (%.2f GiB per rank on the GPU, %.1f GiB of host memory per "
                   "rank%s)\n", (long long)T, po.fits ? "fits" : "does not fit either",
                   po.total / G, po.host / G,
                   po.fits && po.host > o.host_budget ? ": more than the host memory planned for, see above" : "");
        }
    }
    if (W > 1) { /* the step's communication (lora/model/comm_plan.h) */
        glm_comm_plan_in ci = {.cfg = &cfg, .lora_params = li.params, .plan = &p, .world = W, .cp = cp,
                               .shard_base = ts->opt.shard_base, .accum = (int)ts->opt.gradient_accumulation_steps,
                               .act_bytes = eb, .acc_bytes = o.acc_bytes, .weight_bytes = o.weight_bytes,
                               .base_format = o.base_format,
                               .double_quant = o.double_quant, .tflops = ts->opt.gpu_tflops};
        glm_comm_plan cpn;
        glm_comm_plan_make(&ci, &cpn);
        glm_link links[3] = {{"NVLink 4 (450 GB/s)", GLM_LINK_NVLINK_GBPS},
                             {"PCIe 5.0 x16 (64 GB/s)", GLM_LINK_PCIE5_GBPS},
                             {"PCIe 4.0 x16 (32 GB/s)", GLM_LINK_PCIE4_GBPS}};
        char lname[64];
        int nl = 3;
        if (ts->opt.interconnect_gbps > 0) {
            snprintf(lname, sizeof lname, "--interconnect-gbps %g", ts->opt.interconnect_gbps);
            links[0] = (glm_link){lname, ts->opt.interconnect_gbps};
            nl = 1;
        }
        if (cpu) printf("(--device cpu: the ranks talk over MPI; the times below are for GPUs at these links)\n");
        glm_comm_plan_print(&ci, &cpn, links, nl, stdout);
    } else if (ts->opt.interconnect_gbps > 0 || ts->opt.gpu_tflops > 0) {
        printf("--interconnect-gbps / --gpu-tflops: not used with one rank (no communication to time)\n");
    }
#ifdef GLMTUNE_HAVE_CUDA
    if (be && !strcmp(be->name, "cuda")) glm_backend_cuda_close(be);
#endif
    *fits = p.fits;
    return GLM_OK;
}

