/* lora/model/model.h: the GLM-4 decoder (docs/design.md §3) over the backend interface, with optional LoRA:
 * forward, target-token cross-entropy and backward to the LoRA weights for a packed batch.
 *
 *   x = embedding(ids)
 *   per layer: x += dense(attn(rope(qkv(rmsnorm(x)))));  x += dense_4h_to_h(swiglu(dense_h_to_4h(rmsnorm(x))))
 *   logits = output_layer(final_layernorm(x))
 *
 * Base weights are frozen and live in backend memory with dtype be->weight_dtype; the loss head
 * (final norm + output layer + cross-entropy) runs over chunks of tokens so the [B*T, V] logits
 * are never held at once. */
#ifndef GLM_LORA_MODEL_H
#define GLM_LORA_MODEL_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/backend.h"
#include "lora/model/config.h"
#include "lora/adapter/lora.h"
#include "lora/model/plan.h"

typedef struct glm_batch {
    int B, T;
    const uint32_t *ids;     /* [B*T] token ids */
    const uint8_t *targets;  /* [B*T] 1 = ids[b*T+t] is a target, predicted at position t-1 (never the first token of a doc) */
    const int32_t *pos;      /* [B*T] position within the document, restarting at 0 */
    const int32_t *doc;      /* [B*T] document index within the row; attention never crosses documents; padding is its own document with no targets */
    const uint64_t *drop_key;/* [B*T] or NULL: the LoRA dropout key of each token, which decides its mask (see
                                glm_model_step); NULL: b*T + t. The trainer keys a token by its place in the data
                                (global row * T + position, or a sample's own tokens), so that the masks do not depend
                                on how the rows are split into micro-batches and ranks */
} glm_batch;

/* One layer's frozen weights: the norms and the bias dense (be->weight_dtype), the four linear
 * matrices glm_weights (kernels/weight.h) in the model's base format (dense, or 4-bit). */
typedef struct glm_layer_weights {
    void *ln1;        /* input_layernorm [C] */
    glm_weight wqkv;  /* query_key_value [(H+2Hkv) Dh, C] (hf: q_proj; k_proj; v_proj stacked) */
    void *bqkv;       /* its bias [(H+2Hkv) Dh], or NULL without qkv bias */
    glm_weight wo;    /* self_attention.dense / o_proj [C, H Dh] */
    void *ln2;        /* post_attention_layernorm [C] */
    glm_weight w1;    /* dense_h_to_4h / gate_up_proj [2F, C] ([gate | up] rows) */
    glm_weight w2;    /* dense_4h_to_h / down_proj [C, F] */
} glm_layer_weights;

/* The frozen base's format: the linear matrices' (dense as the backend stores them, or 4-bit as
 * QLoRA quantizes them; the embedding, the output layer, the norms and the bias stay dense). */
typedef struct glm_base_format {
    int quant_bits;    /* 0: dense (be->weight_dtype); 4: 4-bit */
    glm_wformat q4;    /* with quant_bits 4: GLM_WF_NF4 or GLM_WF_FP4 */
    int double_quant;  /* with quant_bits 4: absmax double-quantized */
    int fp8;           /* 1 (with quant_bits 0): FP8 E4M3 with a scale per output channel (GLM_WF_FP8_E4M3), the
                          GEMMs on FP8 tensor cores (glm_base_matmul); needs GLM_FEATURE_FP8 */
} glm_base_format;

struct glm_ws; /* lora/model/step_ws.c: the step's buffers, allocated once per batch shape */

/* How a model plans and runs its steps, set by glm_model_set_options (all zero: the defaults). The
 * model keeps them in its fields of the same names (glm_model.loss_chunk, ...), which the step reads;
 * callers set them only through glm_model_set_options. */
typedef struct glm_model_options {
    int64_t loss_chunk;        /* tokens per loss-head chunk; 0: the planner's choice */
    int64_t mlp_chunk;         /* tokens per MLP chunk; 0: the planner's choice */
    double max_bytes;          /* bytes: a cap on everything the process holds on the device (as be->set_mem_cap
                                  enforces it); the plans' budget is the cap less be->mem_overhead; 0: what the
                                  device has free */
    int offload;               /* layer inputs in host memory (lora/model/plan.h): 0 when a step does not fit the
                                  GPU without it, 1 always, -1 never */
    int offload_layers;        /* with offload 1: how many layer inputs (the first ones) go to host memory; 0: all */
    int optimizer;             /* 1: plans count AdamW's two moments per LoRA parameter (training) */
    int cp;                    /* context parallel over cp ranks of cp_comm (see glm_model: "Context parallel"); 0 or 1: off */
    const glm_backend *cp_comm;/* with cp > 1: the group's communicator (cp_comm->world == cp) */
} glm_model_options;

typedef struct glm_model {
    glm_config cfg;
    const glm_backend *be;
    glm_base_format fmt;       /* the linear matrices' format (set at load) */
    glm_weight embed;          /* word_embeddings / embed_tokens [V, C], dense */
    void *final_ln;            /* final_layernorm / norm [C] */
    glm_weight out_w;          /* output_layer / lm_head [V, C], dense */
    glm_layer_weights *layers; /* [L] */
    float *inv_freq;           /* RoPE frequencies [rope_dim/2] f32, backend memory (glm_rope_inv_freq) */
    glm_model_options opt;     /* set by glm_model_set_options (glm_model_options says what each means); context
                                  parallel (opt.cp, opt.cp_comm): see below */
    int run_layers;            /* > 0: a step runs only layers [0, run_layers) in its forward and backward, with
                                  the whole model's plan and workspace (the memory proof, lora/model/model_prove.h);
                                  0 (default): every layer */
    /* Set by glm_model_set_grad_ready. Data parallel: when set, glm_model_step's backward calls grad_ready(grad_ready_user, l) right
     * after layer l's LoRA gradients are final for the micro-batch (l = L-1 down to 0; on CUDA the
     * layer's backward is queued, not necessarily done: the callee orders its communication after
     * it, e.g. be->all_reduce_start), so the trainer can all-reduce that layer's bucket while the
     * earlier layers compute. An error it returns stops the step. */
    glm_status (*grad_ready)(void *user, int layer);
    void *grad_ready_user;
    /* Set by glm_model_set_next_batch. When set, a training glm_model_step calls next_batch(next_batch_user) once its backward is
     * queued and before it waits for it (on CUDA the GPU is still busy then): the trainer reads
     * its next micro-batch and hands it to glm_model_prefetch, so that the host's work and the
     * upload overlap the backward. An error it returns stops the step. */
    glm_status (*next_batch)(void *user);
    void *next_batch_user;
    int64_t batches_prefetched; /* steps whose batch glm_model_prefetch had uploaded (for tests, bench) */
    int64_t batches_kept;       /* steps whose batch was still on the device from an earlier step */
    struct glm_ws *ws;         /* the workspace of the last step (reused while the shape fits) */
    /* Frozen-base sharding (--shard-base; glm_model_load_dist with world > 1): shard_world ranks
     * each hold shard `be->rank` of every base matrix: embed, out_w and each layer's wqkv, wo, w1,
     * w2 hold glm_weight_shard_elems(fmt, numel, shard_world) = sn elements (element k of the shard
     * is element rank * sn + k of the row-major tensor; the last shard zero-padded), in their
     * stored format (a 4-bit shard is whole double-quantization groups: its codes, absmax and
     * absmax2 are slices of the whole tensor's). Norm weights and the qkv bias stay whole.
     * glm_model_step all-gathers a layer's four matrices, in the stored format, into one of two
     * gather slots just before the layer runs (then dequantizes a 4-bit layer) and prefetches the next
     * one (forward l+1, backward l-1) into the other while it computes; the embedding and the
     * output layer share a third slot (embedding at the start, output layer prefetched right
     * after it). Every rank must run the same sequence of steps (the gathers are collectives).
     * 0: every rank holds the whole base. */
    int shard_world;
    /* Context parallel (--context-parallel, lora/model/ring_attention.h): opt.cp > 1 splits every row of a
     * batch over the opt.cp ranks of opt.cp_comm (a comm_split group; cp_comm->world == cp, its rank is
     * this rank's place). glm_model_step then takes whole rows (every rank of the group the same
     * batch: ids, targets, pos and doc of all T tokens, as the loader gives them), computes this
     * rank's 2 chunks of each row (attention as a ring over the group, every other op on the local
     * tokens), and returns this rank's share of the loss sum and target count and ACCUMULATES its
     * share of the LoRA gradients: summed over the group (the trainer all-reduces over the world),
     * they are those of the unsplit rows. Every rank of the group must run the same steps.
     * glm_model_logits refuses it. opt.cp 0 or 1: off. Set by glm_model_set_options. */
} glm_model;

/* Loads config.json (glm_config_load with rope_theta_override, see lora/model/config.h) and the weights
 * from `dir` (model.safetensors, a sharded model.safetensors.index.json, or the one *.safetensors
 * file; F32/F16/BF16/F64 converted to fp32 on the host, then uploaded as be->weight_dtype).
 * The tensor names are those of the config's family row (lora/model/family.h); the row's ignored
 * tensors (transformer.rotary_pos_emb.inv_freq: RoPE is computed from the config) are skipped, and
 * any other tensor that the load would not read is refused before anything is read (another
 * model's block, a bias the config turns off, layers past the config's count).
 * Errors (the message names the tensor, the expected vs found shape, and the file):
 * GLM_ERR_IO, GLM_ERR_FORMAT (missing tensor, truncated or malformed file; a config.json that no
 * family row describes), GLM_ERR_MISMATCH (wrong shape; a tensor nothing reads, named with its
 * file), GLM_ERR_UNSUPPORTED (dtype; a GLM relative glmtune does not implement, e.g. GLM-4-0414),
 * GLM_ERR_NOMEM. */
glm_status glm_model_load(const char *dir, const glm_backend *be, double rope_theta_override, glm_model **out);
/* The check glm_model_load makes of a checkpoint's tensors (set, opened from the directory whose
 * config.json gave c): every one is a tensor the load reads or one the family row ignores; the
 * merge of export-adapter makes it of its base too. Errors: GLM_ERR_MISMATCH naming the first
 * other tensor and its file (and how many more), with a hint; GLM_ERR_NOMEM. */
struct glm_st_set;
glm_status glm_model_check_tensors(const glm_config *c, const struct glm_st_set *set);
/* Whether config c's frozen matrices take the FP8 base: every dimension (hidden, ffn, heads x head
 * dim, qkv rows) a multiple of 16, as FP8 tensor cores need. Errors: GLM_ERR_UNSUPPORTED naming the
 * dimension, with the hint --base-dtype bf16. The loaders check it; so does the dry run. */
glm_status glm_fp8_dims_check(const glm_config *c);
/* glm_model_load for a data-parallel rank: with shard_base != 0 and be->world > 1 the rank keeps
 * only its 1/world share of every base matrix (see "Frozen-base sharding" below); shard_base == 0
 * is glm_model_load. Errors: as glm_model_load. */
glm_status glm_model_load_dist(const char *dir, const glm_backend *be, double rope_theta_override, int shard_base,
                               glm_model **out);
/* glm_model_load_dist with the linear matrices in format `fmt` (NULL: dense): a 4-bit format is
 * quantized while loading (be->weight_quantize of each bf16 matrix, flattened, as bitsandbytes'
 * quantize_4bit does: deterministic, the same bits on every backend; per checkpoint tensor, so the
 * hf layout's q_proj, k_proj and v_proj are quantized one by one into segments of query_key_value,
 * glm_plan_qkv_segs), fp8 likewise (per row).
 * Errors: as glm_model_load, GLM_ERR_ARG (an invalid format), GLM_ERR_UNSUPPORTED (fp8 on a backend
 * without FP8, with --shard-base, or with a matrix dimension that is not a multiple of 16). */
glm_status glm_model_load_fmt(const char *dir, const glm_backend *be, double rope_theta_override, int shard_base,
                              const glm_base_format *fmt, glm_model **out);
void glm_model_free(glm_model *m);

/* Replaces the RoPE frequency table (host float32 [rope_dim/2]). The default is
 * glm_rope_inv_freq(rope_base, rope_dim), the float32 table of THUDM's code and of transformers.
 * Use: reproducing a reference whose table went through a dtype round trip (transformers'
 * model.to(torch.bfloat16) rounds the inv_freq buffer to bf16; the tiny-glm4 hf goldens carry
 * this, see tests/lora/test_model.c). Errors: backend upload errors. */
glm_status glm_model_set_rope_inv_freq(glm_model *m, const float *inv_freq);

/* Allocates a model whose weights are random (norms 1 + 0.1 N(0,1), embeddings 0.5 N(0,1), biases
 * 0.1 N(0,1), matrices N(0,1)/sqrt(in), drawn by be->fill_normal where they live: no file, no
 * host copy), for benchmarks: `glmtune bench` measures the 9B shape in seconds. The numbers are
 * not those of glm_model_init_random (another generator). Errors: GLM_ERR_NOMEM (naming the
 * tensor), GLM_ERR_FORMAT (invalid cfg). */
glm_status glm_model_create_random(const glm_config *cfg, const glm_backend *be, uint64_t seed, glm_model **out);
/* glm_model_create_random with the linear matrices in format `fmt` (NULL: dense): each matrix is
 * drawn dense into a scratch buffer and quantized where it lives. Errors: as above, GLM_ERR_ARG. */
glm_status glm_model_create_random_fmt(const glm_config *cfg, const glm_backend *be, uint64_t seed,
                                       const glm_base_format *fmt, glm_model **out);
/* Sets the model's options (copied; the next step or glm_model_prepare re-plans its workspace when
 * one that decides it changed). Errors: GLM_ERR_ARG (a negative chunk, max_bytes or offload_layers,
 * offload outside -1..1, cp < 0, cp > 1 without a cp_comm of cp ranks), naming the option; the model is then
 * unchanged. */
glm_status glm_model_set_options(glm_model *m, const glm_model_options *o);
/* The model's current options (all zero on a new model). */
glm_model_options glm_model_get_options(const glm_model *m);
/* Sets (fn NULL: clears) the hook glm_model_step's backward calls as each layer's LoRA gradients
 * become final (see glm_model.grad_ready), with user as its first argument. */
void glm_model_set_grad_ready(glm_model *m, glm_status (*fn)(void *user, int layer), void *user);
/* Sets (fn NULL: clears) the hook a training glm_model_step calls once its backward is queued (see
 * glm_model.next_batch), with user as its argument. */
void glm_model_set_next_batch(glm_model *m, glm_status (*fn)(void *user), void *user);
/* The shard world of a base loaded with --shard-base (shard_base != 0) over `world` ranks: world
 * when shard_base and world > 1, else 0 (every rank holds the whole base), as glm_model_load_dist
 * sets glm_model.shard_world. */
static inline int glm_shard_world(int shard_base, int world) { return shard_base && world > 1 ? world : 0; }

/* "bf16" / "f32" (dense, the backend's dtype), "nf4", "nf4 + double quantization", "fp4", "fp8 (E4M3)", ... */
const char *glm_base_format_name(const glm_model *m);

/* The memory budget (bytes) for plans: the device's free memory plus what glmtune already holds,
 * less a 1 GiB margin; with m->opt.max_bytes set (a cap on everything the process holds on the device,
 * as be->set_mem_cap enforces it), at most m->opt.max_bytes less be->mem_overhead (the CUDA context,
 * library handles and workspaces, which no plan buffer holds). */
double glm_model_budget(const glm_model *m);

/* The sizes of a training step (B rows of T tokens, context parallel over cp ranks, world ranks, loss
 * chunks of loss_chunk rows: 0 for the planner's largest) that decide the backend's scratch, as
 * the model step calls its ops (be->scratch_need, be->scratch_reserve): q|k|v as column blocks of one
 * [N, (H+2Hkv)Dh] buffer, one document per row. Overwrites *s. */
void glm_scratch_shape_for(const glm_config *c, int cp, int world, int B, int T, int backward, int64_t loss_chunk,
                           glm_scratch_shape *s);

/* The plan glm_model_step would use for B rows of T tokens with `mode` (lora may be NULL), made by
 * the one planning entry (lora/model/model_plan.h: glm_model_plan_request -> glm_plan_request_make,
 * as `train --dry-run` plans): its backend scratch is what be->scratch_need answers for the step (on
 * CUDA, cuDNN asked for its workspace), and glm_model_prepare grows that scratch with the buffers
 * (be->scratch_reserve). B or T < 1: a zeroed plan (the step refuses such a batch). */
void glm_model_plan(const glm_model *m, const glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, glm_plan *out);

/* Allocates the step's workspace for B rows of T tokens under `mode` now (so that the first step
 * does not, and an out-of-memory shows before training starts), and returns its plan in *out
 * (may be NULL). Errors: GLM_ERR_NOMEM with the plan in the message and what to change. */
glm_status glm_model_prepare(glm_model *m, glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, glm_plan *out);

/* The plan of the current workspace (NULL before the first step or prepare). */
const glm_plan *glm_model_current_plan(const glm_model *m);

/* One micro-batch: forward, the sum over target tokens of the cross-entropy
 *     loss_sum = sum_{b,t: targets[b,t]} -log softmax(logits[b, t-1])[ids[b,t]]
 * (double) into *loss_sum and the number of target tokens into *n_targets (both OVERWRITTEN).
 * With backward != 0 and lora != NULL, ACCUMULATES d(loss_sum * loss_scale) / d(LoRA weights)
 * into the params' g (the trainer passes loss_scale = 1 / target tokens of the whole global batch).
 * grad_checkpointing is a glm_ckpt_mode (lora/model/plan.h): 0 none, 1 full (keep only each layer's
 * input and recompute the layer in the backward), 2 selective, 3 auto (the planner's mix for the
 * memory budget); all give the same grads (bit-identical on the CPU backend). The workspace is
 * allocated on the first call for a shape and reused while B*T, T and the mode stay the same. LoRA dropout masks come from
 * glm_dropout_u01(dropout_seed, stream = layer * 8 + module, key * D + d) for feature d of a token of key
 * batch->drop_key[b*T+t] (b*T + t without keys) and a LoRA input of D features, so the recomputation and the
 * backward reproduce them, and two calls give a token the same mask whatever batch it is in when its key and
 * dropout_seed are the same; the dropout applies to every call with lora->dropout > 0, backward
 * or not (evaluation sets it to 0). A non-finite loss is returned as it is (the trainer counts and
 * skips such steps). With context parallel (m->opt.cp > 1) the batch is whole rows, the attention a
 * ring over m->opt.cp_comm (a collective: every rank of the group makes the same calls) and the sums
 * and gradients this rank's share of them (see glm_model: "Context parallel"). Errors: GLM_ERR_ARG (bad batch: id
 * >= V, a target at the first token of a row or of a document, B or T <= 0; context parallel
 * without its group communicator), backend and communication errors. */
glm_status glm_model_step(glm_model *m, glm_lora *lora, const glm_batch *batch, float loss_scale, int backward,
                          int grad_checkpointing, uint64_t dropout_seed, double *loss_sum, int64_t *n_targets);

/* Starts the upload of the batch a later glm_model_step will take (CUDA: ids, pos, doc and labels
 * copied on the backend's copy stream, from page-locked host copies, while the queued work runs;
 * typically called from the next_batch hook). The step finds it by its contents (a step whose
 * batch differs uploads its own), so a wrong guess costs time, never correctness. Does nothing
 * when the batch does not fit the current workspace (none yet, another T, more rows), with
 * context parallel, or when the batch is invalid (the step reports that). The batch may be
 * changed or freed after the call. Errors: the backend's. */
glm_status glm_model_prefetch(glm_model *m, const glm_batch *batch);

/* The logits [B*T, V] (host float32, OVERWRITTEN) of every position, for tests and inspection;
 * LoRA (without dropout) applied when lora != NULL. */
glm_status glm_model_logits(glm_model *m, glm_lora *lora, const glm_batch *batch, float *logits);

/* Writes a seeded random GLM-4 of shape `cfg` in `layout` (cfg->layout is ignored) to `outdir`
 * (created): config.json + model.safetensors in bf16, tensor names of that layout's family row
 * (lora/model/family.h). Init (as in
 * ../fixtures/make_fixtures.py): norms 1 + 0.1 N(0,1), embeddings 0.5 N(0,1), biases 0.1 N(0,1),
 * matrices N(0,1)/sqrt(in); element k of tensor t is glm_normal_hash(seed, t, k) (kernels/
 * backend.h), so every CPU core generates and writes its own chunks (glm_st_write_parallel):
 * memory stays at cores x 64 MiB whatever the size. Errors: GLM_ERR_IO, GLM_ERR_NOMEM,
 * GLM_ERR_FORMAT (invalid cfg). */
glm_status glm_model_init_random(const glm_config *cfg, uint64_t seed, const char *outdir, glm_layout layout);

#endif
