/* lora/adapter/lora.c: LoRA adapters (PEFT-compatible names, init and adapter files). */
#include "lora/adapter/lora.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/rng.h"
#include "lora/model/family.h"
#include "lora/model/model.h"
#include "common/safetensors.h"

const char *const *glm_lora_module_names(glm_layout layout, int *n) {
    const glm_family *f = glm_family_get(layout);
    *n = f->n_linears;
    return f->linear_names;
}

void glm_lora_module_path(glm_layout layout, int layer, int module, char *buf, size_t n) {
    const glm_family *f = glm_family_get(layout);
    buf[0] = 0;
    if (module >= 0 && module < f->n_linears) glm_family_module_path(f, f->linears[module], layer, buf, n);
}

static void valid_list(glm_layout layout, char *buf, size_t n) {
    int nm;
    const char *const *names = glm_lora_module_names(layout, &nm);
    buf[0] = 0;
    for (int i = 0; i < nm; i++) {
        strncat(buf, names[i], n - strlen(buf) - 1);
        strncat(buf, ", ", n - strlen(buf) - 1);
    }
    strncat(buf, "all, vllm", n - strlen(buf) - 1);
}

/* Marks one module name; "all"/"all-linear" marks every module; "vllm" every module whose
 * adapters vLLM loads (the family row's linear_vllm): all of the chatglm layout
 * (ChatGLMForCausalLM supports LoRA on all four), and all but gate_up_proj in the hf layout (vLLM
 * runs GlmForCausalLM as its LlamaForCausalLM, whose LoRA expects gate_proj and up_proj and
 * refuses an adapter module named gate_up_proj). */
static glm_status mark_target(glm_layout layout, const char *name, bool *on) {
    int nm;
    const char *const *names = glm_lora_module_names(layout, &nm);
    if (!strcmp(name, "all") || !strcmp(name, "all-linear") || !strcmp(name, "vllm")) {
        const bool *vllm = glm_family_get(layout)->linear_vllm;
        for (int i = 0; i < nm; i++) on[i] = on[i] || strcmp(name, "vllm") || vllm[i];
        return GLM_OK;
    }
    for (int i = 0; i < nm; i++)
        if (!strcmp(name, names[i])) {
            on[i] = true;
            return GLM_OK;
        }
    char valid[256];
    valid_list(layout, valid, sizeof valid);
    return glm_err(GLM_ERR_ARG, "unknown LoRA target module '%s' for a %s-layout checkpoint; valid: %s", name,
                   glm_layout_name(layout), valid);
}

/* Parses a comma-separated target list into on[]. */
static glm_status parse_targets(glm_layout layout, const char *targets, bool *on) {
    memset(on, 0, 6 * sizeof(bool));
    if (!targets || !*targets) targets = "all";
    char *s = strdup(targets);
    if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    int count = 0;
    char *save = NULL;
    for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ' || *tok == '\t') tok++;
        char *e = tok + strlen(tok);
        while (e > tok && (e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
        if (!*tok) continue;
        if ((st = mark_target(layout, tok, on))) break;
        count++;
    }
    free(s);
    if (st == GLM_OK && count == 0) {
        char valid[256];
        valid_list(layout, valid, sizeof valid);
        st = glm_err(GLM_ERR_ARG, "no LoRA target modules given; valid: %s", valid);
    }
    return st;
}

/* Base linear and output rows of a module: the family row's tensor it adapts; q, k and v are the
 * three row blocks of the fused query_key_value. */
static void module_geometry(const glm_config *c, glm_layout layout, int module, glm_linear *lin, int64_t *row0,
                            int64_t *out, int64_t *in) {
    int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    *row0 = 0;
    switch (glm_family_get(layout)->linears[module]) {
    case GLM_FT_Q: *lin = GLM_LIN_QKV; *in = c->C; *out = qd; break;
    case GLM_FT_K: *lin = GLM_LIN_QKV; *in = c->C; *row0 = qd; *out = kd; break;
    case GLM_FT_V: *lin = GLM_LIN_QKV; *in = c->C; *row0 = qd + kd; *out = kd; break;
    case GLM_FT_QKV: *lin = GLM_LIN_QKV; *in = c->C; *out = qd + 2 * kd; break;
    case GLM_FT_O: *lin = GLM_LIN_DENSE; *in = qd; *out = c->C; break;
    case GLM_FT_GATE_UP: *lin = GLM_LIN_H4H; *in = c->C; *out = 2 * (int64_t)c->F; break;
    default: *lin = GLM_LIN_4HH; *in = c->F; *out = c->C; break;
    }
}

void glm_lora_free(glm_lora *l) {
    if (!l) return;
    if (l->w_flat) glm_be_free(l->be, l->w_flat);
    if (l->g_flat) glm_be_free(l->be, l->g_flat);
    free(l->params);
    free(l->sites);
    free(l->layer_first);
    free(l->layer_count);
    free(l);
}

glm_status glm_lora_create(const glm_model *model, const glm_lora_config *cfg, uint64_t seed, glm_lora **out) {
    const glm_config *c = &model->cfg;
    const glm_backend *be = model->be;
    if (cfg->r <= 0) return glm_err(GLM_ERR_ARG, "LoRA rank r must be positive (got %d)", cfg->r);
    if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
        return glm_err(GLM_ERR_ARG, "lora_dropout must be in [0, 1) (got %g)", cfg->dropout);
    if (!isfinite(cfg->alpha)) return glm_err(GLM_ERR_ARG, "lora_alpha must be finite");
    glm_lora *l = calloc(1, sizeof *l);
    if (!l) return glm_err(GLM_ERR_NOMEM, "out of memory");
    l->be = be;
    l->layout = c->layout;
    l->L = c->L;
    l->r = cfg->r;
    l->alpha = cfg->alpha;
    l->dropout = cfg->dropout;
    l->use_rslora = cfg->use_rslora;
    l->scaling = cfg->use_rslora ? (float)(cfg->alpha / sqrt((double)cfg->r)) : cfg->alpha / (float)cfg->r;
    glm_status st = parse_targets(c->layout, cfg->targets, l->module_on);
    if (st) {
        free(l);
        return st;
    }
    int nm;
    glm_lora_module_names(c->layout, &nm);
    int per_layer = 0;
    for (int i = 0; i < nm; i++) per_layer += l->module_on[i];
    l->n_sites = per_layer * c->L;
    l->n_params = 2 * l->n_sites;
    l->sites = calloc((size_t)l->n_sites, sizeof *l->sites);
    l->params = calloc((size_t)l->n_params, sizeof *l->params);
    l->layer_first = calloc((size_t)c->L, sizeof(int));
    l->layer_count = calloc((size_t)c->L, sizeof(int));
    if (!l->sites || !l->params || !l->layer_first || !l->layer_count) {
        glm_lora_free(l);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    int si = 0;
    for (int layer = 0; layer < c->L; layer++) {
        l->layer_first[layer] = si;
        for (int m = 0; m < nm; m++) {
            if (!l->module_on[m]) continue;
            glm_lora_site *s = &l->sites[si];
            s->layer = layer;
            s->module = m;
            module_geometry(c, c->layout, m, &s->lin, &s->row0, &s->out, &s->in);
            s->pa = 2 * si;
            s->pb = 2 * si + 1;
            char path[200];
            glm_lora_module_path(c->layout, layer, m, path, sizeof path);
            glm_param *A = &l->params[s->pa], *B = &l->params[s->pb];
            snprintf(A->name, sizeof A->name, "%s.lora_A.weight", path);
            snprintf(B->name, sizeof B->name, "%s.lora_B.weight", path);
            A->ndim = B->ndim = 2;
            A->shape[0] = cfg->r, A->shape[1] = s->in;
            B->shape[0] = s->out, B->shape[1] = cfg->r;
            A->numel = cfg->r * s->in;
            B->numel = s->out * cfg->r;
            si++;
        }
        l->layer_count[layer] = si - l->layer_first[layer];
    }
    /* the weights and the gradients as two flat buffers, param i at the same offset in both (each
       16-byte aligned), zeros between: one zeroing, one norm and one AdamW call for all of them */
    int64_t maxn = 0, flat = 0;
    for (int i = 0; i < l->n_params; i++) {
        glm_param *p = &l->params[i];
        if (p->numel > maxn) maxn = p->numel;
        p->flat_off = flat;
        flat += (p->numel + 3) / 4 * 4;
    }
    l->flat_n = flat;
    if ((st = glm_be_alloc(be, (size_t)(flat > 0 ? flat : 1) * 4, "LoRA weights", (void **)&l->w_flat)) ||
        (st = glm_be_alloc(be, (size_t)(flat > 0 ? flat : 1) * 4, "LoRA gradients", (void **)&l->g_flat)) ||
        (st = glm_be_zero(be, l->w_flat, (size_t)flat * 4)) || (st = glm_be_zero(be, l->g_flat, (size_t)flat * 4))) {
        glm_lora_free(l);
        return st;
    }
    for (int i = 0; i < l->n_params; i++) {
        glm_param *p = &l->params[i];
        p->w_flat = l->w_flat, p->g_flat = l->g_flat;
        p->w = l->w_flat + p->flat_off, p->g = l->g_flat + p->flat_off;
    }
    float *host = malloc((size_t)(maxn > 0 ? maxn : 1) * sizeof(float));
    if (!host) {
        glm_lora_free(l);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < l->n_params; i++) {
        glm_param *p = &l->params[i];
        if (i % 2 == 0) { /* lora_A: kaiming_uniform_(a=sqrt(5)) -> bound = 1/sqrt(fan_in) */
            glm_rng rng;
            glm_rng_seed(&rng, seed, (uint64_t)i);
            double bound = 1.0 / sqrt((double)p->shape[1]);
            for (int64_t k = 0; k < p->numel; k++) host[k] = (float)((2.0 * glm_rng_uniform(&rng) - 1.0) * bound);
        } else {
            memset(host, 0, (size_t)p->numel * sizeof(float));
        }
        if ((st = glm_be_upload(be, p->w, host, (size_t)p->numel * 4))) break;
    }
    free(host);
    if (st) {
        glm_lora_free(l);
        return st;
    }
    *out = l;
    return GLM_OK;
}

glm_param *glm_lora_params(glm_lora *l, int *n) {
    *n = l->n_params;
    return l->params;
}

glm_status glm_lora_zero_grads(glm_lora *l) { return glm_be_zero(l->be, l->g_flat, (size_t)l->flat_n * 4); }

/* "a b c " from the modules marked in on[] (into buf of n bytes). */
static void target_words(glm_layout layout, const bool *on, char *buf, size_t n) {
    int nm;
    const char *const *names = glm_lora_module_names(layout, &nm);
    buf[0] = 0;
    for (int i = 0; i < nm; i++)
        if (on[i]) snprintf(buf + strlen(buf), n - strlen(buf), "%s ", names[i]);
}

/* adapter_config.json's target_modules (a list, or one name or "all" as a string) into on[]. */
static glm_status config_targets(const glm_lora *l, const json_t *root, const char *path, bool *on) {
    json_t *jt = json_object_get(root, "target_modules");
    memset(on, 0, 6 * sizeof(bool));
    glm_status st = GLM_OK;
    if (json_is_string(jt)) {
        if ((st = mark_target(l->layout, json_string_value(jt), on))) return glm_err_context(st, "%s: target_modules", path);
    } else if (json_is_array(jt)) {
        size_t i;
        json_t *v;
        json_array_foreach(jt, i, v) {
            if (!json_is_string(v)) return glm_err(GLM_ERR_FORMAT, "%s: target_modules[%zu] is not a string", path, i);
            if ((st = mark_target(l->layout, json_string_value(v), on)))
                return glm_err_context(st, "%s: target_modules", path);
        }
    } else {
        return glm_err(GLM_ERR_FORMAT, "%s: target_modules is missing", path);
    }
    return GLM_OK;
}

static glm_status load_config(const char *path, json_t **root) {
    json_error_t je;
    *root = json_load_file(path, 0, &je);
    if (*root) return GLM_OK;
    return glm_is_file(path) ? glm_err(GLM_ERR_FORMAT, "%s: line %d: bad JSON: %s", path, je.line, je.text)
                             : glm_err(GLM_ERR_IO, "%s: cannot read the adapter config", path);
}

glm_status glm_lora_config_targets(const glm_lora *l, const char *path, char *theirs, char *mine, size_t n, bool *same) {
    json_t *root;
    GLM_TRY(load_config(path, &root));
    bool on[6];
    glm_status st = config_targets(l, root, path, on);
    json_decref(root);
    if (st) return st;
    *same = !memcmp(on, l->module_on, sizeof on);
    target_words(l->layout, on, theirs, n);
    target_words(l->layout, l->module_on, mine, n);
    return GLM_OK;
}

/* Compares adapter_config.json with the adapter. */
static glm_status check_adapter_config(const glm_lora *l, const char *path) {
    json_t *root;
    GLM_TRY(load_config(path, &root));
    glm_status st = GLM_OK;
    json_t *jr = json_object_get(root, "r"), *ja = json_object_get(root, "lora_alpha");
    json_t *jrs = json_object_get(root, "use_rslora");
    const char *pt = json_string_value(json_object_get(root, "peft_type"));
    bool on[6];
    if (pt && strcmp(pt, "LORA")) {
        st = glm_err(GLM_ERR_UNSUPPORTED, "%s: peft_type is '%s'; only LORA adapters are supported", path, pt);
    } else if (!json_is_integer(jr) || json_integer_value(jr) != l->r) {
        st = glm_err(GLM_ERR_MISMATCH, "%s: r is %lld but this run's adapter has r = %d; hint: --lora-rank %lld (lora_rank) "
                     "to match the adapter", path, json_is_integer(jr) ? (long long)json_integer_value(jr) : -1LL, l->r,
                     json_is_integer(jr) ? (long long)json_integer_value(jr) : -1LL);
    } else if (!json_is_number(ja) || fabs(json_number_value(ja) - l->alpha) > 1e-6 * fabs(l->alpha)) {
        st = glm_err(GLM_ERR_MISMATCH, "%s: lora_alpha is %g but this run's adapter has alpha = %g; hint: --lora-alpha %g "
                     "to match the adapter", path, json_is_number(ja) ? json_number_value(ja) : NAN, l->alpha,
                     json_is_number(ja) ? json_number_value(ja) : NAN);
    } else if (jrs && json_is_boolean(jrs) && json_is_true(jrs) != l->use_rslora) {
        st = glm_err(GLM_ERR_MISMATCH, "%s: use_rslora is %s but this run's adapter has %s; hint: --use-rslora %s to match "
                     "the adapter", path, json_is_true(jrs) ? "true" : "false", l->use_rslora ? "true" : "false",
                     json_is_true(jrs) ? "true" : "false");
    } else if ((st = config_targets(l, root, path, on)) == GLM_OK && memcmp(on, l->module_on, sizeof on)) {
        char a[256], b[256];
        target_words(l->layout, on, a, sizeof a);
        target_words(l->layout, l->module_on, b, sizeof b);
        st = glm_err(GLM_ERR_MISMATCH, "%s: the adapter's target_modules are { %s} but this run targets { %s}; hint: "
                     "--lora-target with the adapter's modules", path, a, b);
    }
    json_decref(root);
    return st;
}

glm_status glm_param_shape_error(const char *file, const char *name, int ndim, const int64_t *shape, const glm_param *p) {
    char have[96] = "", want[96] = "";
    for (int d = 0, a = 0; d < ndim && d < 4 && a < 80; d++)
        a += snprintf(have + a, sizeof have - (size_t)a, "%s%lld", d ? ", " : "", (long long)shape[d]);
    for (int d = 0, a = 0; d < p->ndim && a < 80; d++)
        a += snprintf(want + a, sizeof want - (size_t)a, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
    /* lora_A: [r, in_features]; lora_B: [out_features, r] (their AdamW state alike) */
    int rank_dim = strstr(name, "lora_A") ? 0 : strstr(name, "lora_B") ? 1 : -1;
    if (ndim != 2 || p->ndim != 2 || rank_dim < 0)
        return glm_err(GLM_ERR_MISMATCH, "%s: tensor '%s' is [%s], this run has [%s]; hint: it was made for another "
                       "model or adapter settings: use the model and lora settings it was made with", file, name, have,
                       want);
    int feat_dim = 1 - rank_dim;
    const char *feat = rank_dim == 0 ? "input size (in_features)" : "output size (out_features)";
    bool rank_differs = shape[rank_dim] != p->shape[rank_dim], feat_differs = shape[feat_dim] != p->shape[feat_dim];
    char rank_txt[200] = "", feat_txt[400] = "";
    if (rank_differs)
        snprintf(rank_txt, sizeof rank_txt, "its LoRA rank is %lld, this run's lora-rank is %lld",
                 (long long)shape[rank_dim], (long long)p->shape[rank_dim]);
    if (feat_differs)
        snprintf(feat_txt, sizeof feat_txt, "the layer's %s is %lld in it and %lld in this model: it was made for a "
                 "model of another size (hidden_size, ffn_hidden_size or attention heads)", feat,
                 (long long)shape[feat_dim], (long long)p->shape[feat_dim]);
    if (feat_differs)
        return glm_err(GLM_ERR_MISMATCH, "%s: tensor '%s' is [%s], this run has [%s]: %s%s%s; hint: use it with the base "
                       "model it was trained on (--model, model_name_or_path), or train a new adapter for this model",
                       file, name, have, want, feat_txt, rank_differs ? ", and " : "", rank_txt);
    return glm_err(GLM_ERR_MISMATCH, "%s: tensor '%s' is [%s], this run has [%s]: %s; hint: --lora-rank %lld (lora_rank) "
                   "to match it", file, name, have, want, rank_txt, (long long)shape[rank_dim]);
}

/* Every tensor of the adapter file is one of the run's params: one this run does not train (a module
 * outside --lora-target, a name of no module, a modules_to_save copy of a full weight) would be
 * dropped from every adapter the run writes. Errors: GLM_ERR_MISMATCH (a LoRA weight of a module the
 * run does not train) or GLM_ERR_UNSUPPORTED (not a LoRA weight), naming the file and the tensor. */
static glm_status check_peft_no_extra(const glm_lora *l, const glm_st_set *s, const char *file) {
    const char *pre = "base_model.model.";
    for (size_t i = 0; i < glm_st_count(s); i++) {
        const char *name = glm_st_at(s, i)->name, *k = name;
        if (!strncmp(k, pre, strlen(pre))) k += strlen(pre);
        int j = 0;
        while (j < l->n_params && strcmp(l->params[j].name, k)) j++;
        if (j < l->n_params) continue;
        char valid[256];
        valid_list(l->layout, valid, sizeof valid);
        if (!strstr(k, ".lora_A.weight") && !strstr(k, ".lora_B.weight"))
            return glm_err(GLM_ERR_UNSUPPORTED, "%s: holds tensor '%s', which is not a LoRA weight (a modules_to_save "
                           "copy or another full weight): glmtune trains LoRA only, and starting from this adapter would "
                           "drop it; hint: an adapter without modules_to_save, of LoRA weights of the modules glmtune trains "
                           "(--lora-target: %s)",
                           file, name, valid);
        char mine[256];
        target_words(l->layout, l->module_on, mine, sizeof mine);
        return glm_err(GLM_ERR_MISMATCH, "%s: holds tensor '%s', which this run does not train (it targets { %s}): "
                       "starting from this adapter would drop it; hint: --lora-target with the adapter's modules, of "
                       "those glmtune trains (%s)", file, name, mine, valid);
    }
    return GLM_OK;
}

glm_status glm_lora_load_peft(glm_lora *l, const char *dir) {
    char *cfgp = glm_path_join(dir, "adapter_config.json");
    char *stp = glm_path_join(dir, "adapter_model.safetensors");
    if (!cfgp || !stp) {
        free(cfgp);
        free(stp);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    glm_status st = check_adapter_config(l, cfgp);
    glm_st_set *set = NULL;
    float *host = NULL;
    if (st) goto done;
    if ((st = glm_st_open(stp, &set))) goto done;
    int64_t maxn = 1;
    for (int i = 0; i < l->n_params; i++)
        if (l->params[i].numel > maxn) maxn = l->params[i].numel;
    host = malloc((size_t)maxn * sizeof(float));
    if (!host) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < l->n_params; i++) {
        glm_param *p = &l->params[i];
        char key[300];
        snprintf(key, sizeof key, "base_model.model.%s", p->name);
        const glm_st_tensor *t = glm_st_find(set, key);
        if (t && (t->ndim != 2 || t->shape[0] != p->shape[0] || t->shape[1] != p->shape[1])) {
            st = glm_param_shape_error(t->file, key, t->ndim, t->shape, p);
            goto done;
        }
        if ((st = glm_st_read_f32(set, key, 2, p->shape, host))) goto done;
        if ((st = glm_be_upload(l->be, p->w, host, (size_t)p->numel * 4))) goto done;
    }
    st = check_peft_no_extra(l, set, stp);
done:
    if (st) glm_err_context(st, "loading LoRA adapter %s", dir);
    free(host);
    if (set) glm_st_close(set);
    free(cfgp);
    free(stp);
    return st;
}


/* ---- shape for the memory planner ---- */

static void info_add(glm_lora_info *o, const glm_config *c, glm_layout layout, int r, const bool *on, int nm) {
    int per_lin[4] = {0, 0, 0, 0};
    for (int m = 0; m < nm; m++) {
        if (!on[m]) continue;
        glm_linear lin;
        int64_t row0, out, in;
        module_geometry(c, layout, m, &lin, &row0, &out, &in);
        o->params += (int64_t)c->L * r * (in + out);
        o->n_sites += c->L;
        per_lin[lin]++;
        if (lin == GLM_LIN_QKV || lin == GLM_LIN_DENSE) {
            if (in > o->max_in_attn) o->max_in_attn = in;
        } else if (in > o->max_in_mlp) {
            o->max_in_mlp = in;
        }
    }
    int layer = 0;
    for (int i = 0; i < 4; i++) {
        if (per_lin[i] > o->max_sites_lin) o->max_sites_lin = per_lin[i];
        layer += per_lin[i];
    }
    if (layer > o->max_sites_layer) o->max_sites_layer = layer;
}

glm_status glm_lora_info_for(const glm_config *c, const glm_lora_config *cfg, glm_lora_info *out) {
    memset(out, 0, sizeof *out);
    if (cfg->r <= 0) return glm_err(GLM_ERR_ARG, "LoRA rank r must be positive (got %d)", cfg->r);
    bool on[6];
    GLM_TRY(parse_targets(c->layout, cfg->targets, on));
    int nm;
    glm_lora_module_names(c->layout, &nm);
    out->r = cfg->r;
    out->dropout = cfg->dropout > 0;
    info_add(out, c, c->layout, cfg->r, on, nm);
    return GLM_OK;
}

void glm_lora_info_of(const glm_lora *l, glm_lora_info *out) {
    memset(out, 0, sizeof *out);
    if (!l) return;
    out->r = l->r;
    out->dropout = l->dropout > 0;
    for (int i = 0; i < l->n_params; i++) out->params += l->params[i].numel;
    out->n_sites = l->n_sites;
    for (int layer = 0; layer < l->L; layer++) {
        int per_lin[4] = {0, 0, 0, 0};
        for (int k = 0; k < l->layer_count[layer]; k++) {
            const glm_lora_site *s = &l->sites[l->layer_first[layer] + k];
            per_lin[s->lin]++;
            if (s->lin == GLM_LIN_QKV || s->lin == GLM_LIN_DENSE) {
                if (s->in > out->max_in_attn) out->max_in_attn = s->in;
            } else if (s->in > out->max_in_mlp) {
                out->max_in_mlp = s->in;
            }
        }
        for (int i = 0; i < 4; i++)
            if (per_lin[i] > out->max_sites_lin) out->max_sites_lin = per_lin[i];
        if (l->layer_count[layer] > out->max_sites_layer) out->max_sites_layer = l->layer_count[layer];
    }
}
