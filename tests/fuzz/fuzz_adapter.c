/* tests/fuzz/fuzz_adapter.c: a PEFT adapter's adapter_config.json as train --init-adapter and
 * --resume-from-checkpoint read it (lora/adapter/lora.c: glm_lora_load_peft's check of
 * peft_type, r, lora_alpha, use_rslora and target_modules, then the adapter's tensors;
 * glm_lora_config_targets, the resume check of a checkpoint's targets). The input is the file.
 * Once per process, two tiny random models (chatglm and hf layout, 1 layer) get a LoRA (r 4,
 * alpha 8, every module, as tests/fixtures/tiny-glm4/<layout>/adapter_init) and its
 * adapter_model.safetensors is written beside the fuzzed config; an input that holds "_proj" (an
 * hf module name) goes to the hf adapter, any other to the chatglm adapter. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "kernels/backend.h"
#include "lora/adapter/lora.h"
#include "lora/io/export.h"
#include "lora/model/config.h"
#include "lora/model/model.h"

static glm_model *g_model[2]; /* kept (reachable) for the process's life, with its adapter */
static glm_lora *g_lora[2];
static char g_dir[2][300];

static void setup(int k) {
    static const char *const cfg_json[2] = {
        "{\"model_type\": \"chatglm\", \"hidden_size\": 16, \"num_layers\": 1, \"num_attention_heads\": 2, "
        "\"multi_query_group_num\": 1, \"kv_channels\": 8, \"ffn_hidden_size\": 24, \"padded_vocab_size\": 64, "
        "\"layernorm_epsilon\": 1e-5, \"rope_ratio\": 1, \"add_qkv_bias\": true}",
        "{\"model_type\": \"glm\", \"hidden_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
        "\"num_key_value_heads\": 1, \"head_dim\": 8, \"intermediate_size\": 24, \"vocab_size\": 64, "
        "\"rms_norm_eps\": 1e-5, \"rope_theta\": 5000000, \"partial_rotary_factor\": 0.5, \"attention_bias\": true}"};
    const char *p = fuzz_write_file((const uint8_t *)cfg_json[k], strlen(cfg_json[k]), ".json");
    glm_config cfg;
    if (glm_config_load(p, 0, &cfg) != GLM_OK) abort();
    unlink(p);
    const glm_backend *be = glm_backend_cpu();
    if (glm_model_create_random(&cfg, be, 7, &g_model[k]) != GLM_OK) abort();
    glm_lora_config lc = {4, 8.0f, 0.0f, false, "all"};
    if (glm_lora_create(g_model[k], &lc, 3, &g_lora[k]) != GLM_OK) abort();
    snprintf(g_dir[k], sizeof g_dir[k], "%s/%s", fuzz_dir(), k ? "hf" : "chatglm");
    mkdir(g_dir[k], 0700);
    int nm = 0;
    const char *const *names = glm_lora_module_names(cfg.layout, &nm);
    glm_adapter_cfg ac = {.r = 4, .alpha = 8, .target_modules = names, .n_targets = (size_t)nm};
    if (glm_adapter_write_files(g_dir[k], be, g_lora[k]->params, (size_t)g_lora[k]->n_params, &ac, GLM_ST_F32) != GLM_OK)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    int k = memmem(data, size, "_proj", 5) != NULL;
    if (!g_lora[k]) setup(k);
    char path[400];
    snprintf(path, sizeof path, "%s/adapter_config.json", g_dir[k]);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    (void)glm_lora_load_peft(g_lora[k], g_dir[k]);
    char theirs[256], mine[256];
    bool same;
    (void)glm_lora_config_targets(g_lora[k], path, theirs, mine, sizeof theirs, &same);
    return 0;
}
