/* tests/model_opt.h: MODEL_OPT(m, field, value) sets one of a model's options (lora/model/model.h
 * glm_model_options) through glm_model_set_options, the others as they are, and records a failure
 * (tests/check.h CHECK) when the model refuses it. */
#ifndef GLM_TESTS_MODEL_OPT_H
#define GLM_TESTS_MODEL_OPT_H

#include "lora/model/model.h"
#include "tests/check.h"

#define MODEL_OPT(m, field, value)                                                                      \
    do {                                                                                                \
        glm_model_options mo_ = glm_model_get_options(m);                                               \
        mo_.field = (value);                                                                            \
        CHECK(glm_model_set_options((m), &mo_) == GLM_OK, "set option " #field ": %s", glm_errmsg());   \
    } while (0)

#endif
