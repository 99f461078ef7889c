/* lora/model/plan_search.c: the longest row a plan fits (lora/model/plan.h): one bisection over the row
 * length for every caller (the dry run, bench, the model). */
#include "lora/model/plan.h"

#include <stdint.h>

int64_t glm_plan_bisect(glm_plan_at_fn at, void *ctx, int64_t step, int64_t max_T, glm_plan *best) {
    glm_plan p;
    if (step < 1) step = 1;
    if (max_T > INT32_MAX) max_T = INT32_MAX;
    int64_t lo = 0, hi = max_T / step; /* in steps: lo fits (0: nothing yet), hi + 1 does not, or hi = the cap */
    at(ctx, (int)step, &p);
    if (!p.fits) {
        if (best) *best = p; /* what even the shortest row takes */
        return 0;
    }
    lo = 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        at(ctx, (int)(mid * step), &p);
        if (p.fits) lo = mid;
        else hi = mid - 1;
    }
    if (best) at(ctx, (int)(lo * step), best);
    return lo * step;
}

typedef struct {
    const glm_config *c;
    const glm_lora_info *li;
    int B, backward;
    const glm_plan_opts *o;
} longest_ctx;

static void longest_at(void *ctx, int T, glm_plan *p) {
    const longest_ctx *x = ctx;
    glm_plan_make(x->c, x->li, x->B, T, x->backward, x->o, p);
}

int64_t glm_plan_longest(const glm_config *c, const glm_lora_info *li, int B, int backward, const glm_plan_opts *o,
                         int64_t step, int64_t max_T, glm_plan *best) {
    longest_ctx x = {c, li, B, backward, o};
    return glm_plan_bisect(longest_at, &x, step, max_T, best);
}
