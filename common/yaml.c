/* common/yaml.c: the reader of LLaMA-Factory-style YAML configs (common/yaml.h), over libyaml. */
#include "common/yaml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <yaml.h>

/* A YAML mapping value (lr_scheduler_kwargs) as JSON text: numbers stay numbers. */
static char *mapping_json(yaml_document_t *doc, yaml_node_t *m) {
    json_t *o = json_object();
    for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; o && pr < m->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(doc, pr->key), *v = yaml_document_get_node(doc, pr->value);
        if (k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE) {
            json_decref(o);
            return NULL;
        }
        const char *vs = (const char *)v->data.scalar.value;
        char *end;
        double x = strtod(vs, &end);
        json_object_set_new(o, (const char *)k->data.scalar.value, *vs && !*end ? json_real(x) : json_string(vs));
    }
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return t;
}

glm_status glm_yaml_config_each(const char *path, bool one_document, glm_yaml_key_fn fn, void *ctx) {
    FILE *f = fopen(path, "rb");
    if (!f) return glm_err(GLM_ERR_IO, "%s: cannot open the config: %s; hint: check the path", path, strerror(errno));
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        return glm_err(GLM_ERR_NOMEM, "out of memory (YAML parser)");
    }
    yaml_parser_set_input_file(&p, f);
    glm_status st = GLM_OK;
    if (!yaml_parser_load(&p, &doc)) {
        st = glm_err(GLM_ERR_FORMAT, "%s:%zu:%zu: bad YAML: %s; hint: a training YAML is one mapping of `key: value` "
                     "lines (LLaMA-Factory's form; samples/train.yaml is one)", path, p.problem_mark.line + 1,
                     p.problem_mark.column + 1, p.problem ? p.problem : "parse error");
        yaml_parser_delete(&p);
        fclose(f);
        return st;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc); /* NULL: an empty file sets nothing */
    if (root && root->type != YAML_MAPPING_NODE)
        st = glm_err(GLM_ERR_FORMAT, "%s: the config must be a mapping of key: value lines", path);
    for (yaml_node_pair_t *pr = root && st == GLM_OK ? root->data.mapping.pairs.start : NULL;
         pr && st == GLM_OK && pr < root->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(&doc, pr->key), *v = yaml_document_get_node(&doc, pr->value);
        int line = (int)k->start_mark.line + 1;
        if (k->type != YAML_SCALAR_NODE) {
            st = glm_err(GLM_ERR_FORMAT, "%s:%d: keys must be plain names", path, line);
            break;
        }
        const char *key = (const char *)k->data.scalar.value;
        char *val = NULL;
        bool mapping = false;
        if (v->type == YAML_SCALAR_NODE) {
            val = strdup((const char *)v->data.scalar.value);
        } else if (v->type == YAML_SEQUENCE_NODE) { /* a list (dataset: [a, b]): joined with commas */
            size_t cap = 1;
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                yaml_node_t *e = yaml_document_get_node(&doc, *it);
                if (e->type != YAML_SCALAR_NODE) {
                    st = glm_err(GLM_ERR_FORMAT, "%s:%d: %s: list items must be plain values", path, line, key);
                    break;
                }
                cap += e->data.scalar.length + 1;
            }
            if (st != GLM_OK) break;
            val = calloc(cap, 1);
            for (yaml_node_item_t *it = v->data.sequence.items.start; val && it < v->data.sequence.items.top; it++) {
                if (*val) strcat(val, ",");
                strcat(val, (const char *)yaml_document_get_node(&doc, *it)->data.scalar.value);
            }
            if (!val) st = glm_err(GLM_ERR_NOMEM, "out of memory");
        } else {
            mapping = true;
            val = mapping_json(&doc, v); /* NULL when it is not a mapping of plain values */
        }
        if (st == GLM_OK && !val && !mapping) st = glm_err(GLM_ERR_NOMEM, "out of memory");
        if (st == GLM_OK) st = fn(ctx, path, line, key, val, mapping);
        free(val);
    }
    if (st == GLM_OK && one_document) { /* a second document ("---") would be ignored silently */
        yaml_document_t doc2;
        if (yaml_parser_load(&p, &doc2)) {
            if (yaml_document_get_root_node(&doc2))
                st = glm_err(GLM_ERR_ARG, "%s:%zu: a second YAML document (after \"---\"): glmtune reads one; hint: "
                             "put every setting in one document", path, p.mark.line);
            yaml_document_delete(&doc2);
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    fclose(f);
    return st;
}
