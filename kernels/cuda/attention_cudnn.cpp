/* kernels/cuda/attention_cudnn.cpp: cuDNN's fused flash attention through the cudnn-frontend
 * graph API (header-only; NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: every cuDNN call goes through
 * the handle that cudnn_attn_create dlopens, so the module neither links nor needs cuDNN).
 * What the graphs compute and how packed rows become ragged batches: attention_cudnn.h. */
#include "kernels/cuda/attention_cudnn.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include <cudnn_frontend.h>

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; /* the shim's handle of libcudnn (cudnn_frontend_shim.h) */
}

namespace fe = cudnn_frontend;

namespace glmcu {

/* tensor uids of the variant pack */
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SEQ_Q, U_SEQ_KV, U_OFF_Q, U_OFF_K, U_OFF_V,
       U_OFF_O, U_OFF_S };

typedef std::tuple<int, int, int, int, int, int, int64_t, int64_t, int64_t, int64_t> shape_key;

struct cudnn_attn {
    cudnnHandle_t handle = nullptr;
    long version = 0;
    std::map<shape_key, std::shared_ptr<fe::graph::Graph>> graphs;
    std::map<shape_key, std::string> refused;
};

static shape_key key_of(const cudnn_attn_shape *s) {
    return shape_key(s->bwd, s->nb, s->s_max, s->H, s->Hkv, s->Dh, s->ldq, s->ldk, s->ldv, s->ldo);
}

cudnn_attn *cudnn_attn_create(const char **why) {
    if (!fe::cudnn_dlhandle) {
        const char *lib = getenv("GLMTUNE_CUDNN_LIBRARY");
        fe::cudnn_dlhandle = dlopen(lib && *lib ? lib : "libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
        if (!fe::cudnn_dlhandle) {
            *why = "libcudnn.so.9 not found (install cuDNN 9, e.g. the libcudnn9-cuda-13 package or pip's "
                   "nvidia-cudnn-cu13, and put it on LD_LIBRARY_PATH)";
            return nullptr;
        }
    }
    try {
        long v = (long)fe::detail::get_backend_version();
        if (v < 90600) {
            *why = "cuDNN older than 9.6 (needs grouped-query attention over ragged batches)";
            return nullptr;
        }
        cudnn_attn *c = new cudnn_attn();
        c->version = v;
        if (fe::detail::create_handle(&c->handle) != CUDNN_STATUS_SUCCESS) {
            delete c;
            *why = "cudnnCreate failed";
            return nullptr;
        }
        return c;
    } catch (std::exception &e) {
        static char buf[256];
        snprintf(buf, sizeof buf, "cuDNN failed to start: %s", e.what());
        *why = buf;
        return nullptr;
    }
}

void cudnn_attn_destroy(cudnn_attn *c) {
    if (!c) return;
    c->graphs.clear();
    if (c->handle) fe::detail::destroy_handle(c->handle);
    delete c;
}

long cudnn_attn_version(const cudnn_attn *c) { return c ? c->version : 0; }

/* The graph of one shape: q, k, v (and out, dout, dq, dk, dv) as [nb, heads, s_max, Dh] with
 * strides {., Dh, ld, 1} and per-sequence ragged offsets; stats [nb, H, s_max, 1] f32. */
static std::shared_ptr<fe::graph::Graph> build(cudnn_attn *c, const cudnn_attn_shape *sh, std::string &why) {
    using fe::graph::Tensor_attributes;
    const int64_t b = sh->nb, s = sh->s_max, H = sh->H, Hkv = sh->Hkv, d = sh->Dh;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto offsets = [&](int uid, const char *name) {
        return g->tensor(Tensor_attributes().set_name(name).set_uid(uid).set_dim({b + 1, 1, 1, 1})
                             .set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::INT64));
    };
    auto seq = [&](int uid, const char *name) {
        return g->tensor(Tensor_attributes().set_name(name).set_uid(uid).set_dim({b, 1, 1, 1})
                             .set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::INT32));
    };
    auto oq = offsets(U_OFF_Q, "off_q"), ok = offsets(U_OFF_K, "off_k"), ov = offsets(U_OFF_V, "off_v"),
         oo = offsets(U_OFF_O, "off_o"), os = offsets(U_OFF_S, "off_stats");
    auto sq = seq(U_SEQ_Q, "seq_q"), skv = seq(U_SEQ_KV, "seq_kv");
    auto act = [&](int uid, const char *name, int64_t heads, int64_t ld, std::shared_ptr<Tensor_attributes> off) {
        return g->tensor(Tensor_attributes().set_name(name).set_uid(uid).set_dim({b, heads, s, d})
                             .set_stride({s * ld, d, ld, 1}).set_ragged_offset(off));
    };
    std::vector<int64_t> sdim = {b, H, s, 1};
    std::vector<int64_t> sstride = {H * s, 1, H, 1}; /* token-major: a ragged offset of pos * H */
    auto q = act(U_Q, "q", H, sh->ldq, oq), k = act(U_K, "k", Hkv, sh->ldk, ok), v = act(U_V, "v", Hkv, sh->ldv, ov);
    const float scale = (float)(1.0 / sqrt((double)d));
    if (!sh->bwd) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("attention_fwd")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_causal_mask(true)
                       .set_padding_mask(true)
                       .set_seq_len_q(sq)
                       .set_seq_len_kv(skv);
        auto [o, st] = g->sdpa(q, k, v, opt);
        o->set_output(true).set_uid(U_O).set_dim({b, H, s, d}).set_stride({s * sh->ldo, d, sh->ldo, 1})
            .set_ragged_offset(oo);
        st->set_output(true).set_uid(U_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim(sdim)
            .set_stride(sstride).set_ragged_offset(os);
    } else {
        auto o = act(U_O, "o", H, sh->ldo, oo), dout = act(U_DO, "dout", H, sh->ldo, oo);
        auto st = g->tensor(Tensor_attributes().set_name("stats").set_uid(U_STATS).set_dim(sdim).set_stride(sstride)
                                .set_data_type(fe::DataType_t::FLOAT).set_ragged_offset(os));
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_bwd")
                       .set_attn_scale(scale)
                       .set_causal_mask(true)
                       .set_padding_mask(true)
                       .set_seq_len_q(sq)
                       .set_seq_len_kv(skv);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, st, opt);
        dq->set_output(true).set_uid(U_DQ).set_dim({b, H, s, d}).set_stride({s * sh->ldq, d, sh->ldq, 1})
            .set_ragged_offset(oq);
        dk->set_output(true).set_uid(U_DK).set_dim({b, Hkv, s, d}).set_stride({s * sh->ldk, d, sh->ldk, 1})
            .set_ragged_offset(ok);
        dv->set_output(true).set_uid(U_DV).set_dim({b, Hkv, s, d}).set_stride({s * sh->ldv, d, sh->ldv, 1})
            .set_ragged_offset(ov);
    }
    auto e = g->build(c->handle, {fe::HeurMode_t::A});
    if (e.is_bad()) {
        why = e.get_message();
        return nullptr;
    }
    return g;
}

glm_status cudnn_attn_plan(cudnn_attn *c, const cudnn_attn_shape *sh, void **plan, int64_t *ws_bytes) {
    shape_key key = key_of(sh);
    auto r = c->refused.find(key);
    if (r != c->refused.end())
        return glm_err(GLM_ERR_UNSUPPORTED, "attention: cuDNN %ld declines this shape: %s", c->version, r->second.c_str());
    auto it = c->graphs.find(key);
    std::shared_ptr<fe::graph::Graph> g;
    if (it != c->graphs.end()) {
        g = it->second;
    } else {
        std::string why;
        try {
            g = build(c, sh, why);
        } catch (std::exception &e) {
            why = e.what();
        }
        if (!g) {
            c->refused[key] = why;
            return glm_err(GLM_ERR_UNSUPPORTED, "attention: cuDNN %ld declines this shape (%s, batch %d x %d tokens, "
                           "H=%d Hkv=%d Dh=%d): %s", c->version, sh->bwd ? "backward" : "forward", sh->nb, sh->s_max,
                           sh->H, sh->Hkv, sh->Dh, why.c_str());
        }
        c->graphs[key] = g;
    }
    int64_t ws = 0;
    auto e = g->get_workspace_size(ws);
    if (e.is_bad()) return glm_err(GLM_ERR_DEVICE, "attention: cuDNN workspace size: %s", e.get_message().c_str());
    *plan = g.get();
    *ws_bytes = ws;
    return GLM_OK;
}

glm_status cudnn_attn_run(cudnn_attn *c, void *plan, cudaStream_t s, const cudnn_attn_args *a, void *ws) {
    auto *g = (fe::graph::Graph *)plan;
    if (fe::detail::set_stream(c->handle, s) != CUDNN_STATUS_SUCCESS)
        return glm_err(GLM_ERR_DEVICE, "attention: cudnnSetStream failed");
    std::unordered_map<int64_t, void *> p = {
        {U_Q, (void *)a->q},           {U_K, (void *)a->k},           {U_V, (void *)a->v},
        {U_O, a->out},                 {U_STATS, a->stats},           {U_SEQ_Q, (void *)a->seq_len},
        {U_SEQ_KV, (void *)a->seq_len}, {U_OFF_Q, (void *)a->off_q},  {U_OFF_K, (void *)a->off_k},
        {U_OFF_V, (void *)a->off_v},   {U_OFF_O, (void *)a->off_o},   {U_OFF_S, (void *)a->off_stats}};
    if (a->dout) {
        p[U_DO] = (void *)a->dout;
        p[U_DQ] = a->dq;
        p[U_DK] = a->dk;
        p[U_DV] = a->dv;
    }
    try {
        auto e = g->execute(c->handle, p, ws);
        if (e.is_bad()) return glm_err(GLM_ERR_DEVICE, "attention: cuDNN execute: %s", e.get_message().c_str());
    } catch (std::exception &e) {
        return glm_err(GLM_ERR_DEVICE, "attention: cuDNN execute: %s", e.what());
    }
    return GLM_OK;
}

} // namespace glmcu
