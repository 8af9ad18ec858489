/* flashc_weighted_sum / flashc_weighted_sum_bwd: validation and dispatch.
 * y[r] = Σ_d x[r, d] · w[d] over the rows r of x [..., D]. */
#include "core.h"

#include <string.h>

static flashc_status read_params(const flashc_exec_params *user, flashc_exec_params *p) {
    *p = flashc_exec_params_default();
    if (!user) return FLASHC_OK;
    FC_RETURN_IF(user->struct_size != sizeof(flashc_exec_params), FLASHC_ERR_PARAMS_SIZE,
                 "params.struct_size=%u, this library's flashc_exec_params is %zu bytes (initialise with "
                 "flashc_exec_params_default())",
                 user->struct_size, sizeof(flashc_exec_params));
    memcpy(p, user, sizeof *p);
    return FLASHC_OK;
}

/* `row` ([...], x.ndim-1 axes) must have x's outer shape. */
static flashc_status expect_outer(const flashc_tensor *row, const char *name, const flashc_tensor *x) {
    FC_RETURN_IF(row->ndim != x->ndim - 1, FLASHC_ERR_SHAPE, "%s.ndim=%d, expected x.ndim-1=%d", name,
                 (int)row->ndim, (int)x->ndim - 1);
    for (int i = 0; i < row->ndim; ++i)
        FC_RETURN_IF(row->shape[i] != x->shape[i], FLASHC_ERR_SHAPE, "%s.shape[%d]=%lld must equal x.shape[%d]=%lld",
                     name, i, (long long)row->shape[i], i, (long long)x->shape[i]);
    return FLASHC_OK;
}

static flashc_status describe_x_w(const flashc_tensor *x, const flashc_tensor *w, fc_wsum *p) {
    memset(p, 0, sizeof *p);
    FC_TRY(fc_check_float_tensor(x, "x", -1, 0, "weighted_sum"));
    FC_RETURN_IF(x->ndim < 1, FLASHC_ERR_SHAPE, "x.ndim=0: x must have a last axis [..., D]");
    FC_TRY(fc_check_tensor(w, "w", 1, 0));
    FC_RETURN_IF(w->dtype != x->dtype, FLASHC_ERR_DTYPE, "w.dtype=%s must equal x.dtype=%s", fc_dtype_name(w->dtype),
                 fc_dtype_name(x->dtype));
    p->dtype = x->dtype;
    p->D = x->shape[x->ndim - 1];
    FC_RETURN_IF(w->shape[0] != p->D, FLASHC_ERR_SHAPE, "w.shape[0]=%lld must equal x.shape[%d]=%lld (D)",
                 (long long)w->shape[0], (int)x->ndim - 1, (long long)p->D);
    p->nouter = x->ndim - 1;
    /* R = Π outer extents: 0 when one is 0 (whatever the others), else it
     * may still overflow when D = 0 (x empty, so unchecked): y has R
     * elements, so that is y's overflow, reported here. */
    int64_t R = 1;
    for (int i = 0; i < p->nouter; ++i) {
        p->outer_shape[i] = x->shape[i];
        if (x->shape[i] == 0) R = 0;
    }
    for (int i = 0; i < p->nouter && R != 0; ++i)
        FC_RETURN_IF(__builtin_mul_overflow(R, x->shape[i], &R), FLASHC_ERR_OVERFLOW,
                     "x: the row count (x.shape without its last axis) overflows int64 at shape[%d]=%lld", i,
                     (long long)x->shape[i]);
    p->R = R;
    /* An empty tensor's strides are not checked: zeros, so that no offset is
     * formed from them. */
    const int x_empty = fc_numel(x) == 0;
    for (int i = 0; i < p->nouter; ++i) p->x_ostr[i] = x_empty ? 0 : x->strides[i];
    p->x = x->data;
    p->x_dstr = x_empty ? 0 : x->strides[x->ndim - 1];
    p->w = w->data;
    p->w_str = p->D == 0 ? 0 : w->strides[0];
    return FLASHC_OK;
}

/* The outer strides of a row tensor (y, dy: [...]) or of dx, zeros when it is empty. */
static void copy_outer_strides(int64_t *dst, const flashc_tensor *t, int nouter) {
    const int empty = fc_numel(t) == 0;
    for (int i = 0; i < nouter; ++i) dst[i] = empty ? 0 : t->strides[i];
}

static flashc_status check_same_dtype(const flashc_tensor *t, const char *name, int dtype) {
    FC_RETURN_IF(t->dtype != dtype, FLASHC_ERR_DTYPE, "%s.dtype=%s must equal x.dtype=%s", name,
                 fc_dtype_name(t->dtype), fc_dtype_name(dtype));
    return FLASHC_OK;
}

static flashc_status run(int backend, int bwd, const fc_wsum *p) {
    if (backend == FLASHC_BACKEND_CPU) {
        const fc_team t = fc_cpu_team_begin();
        const flashc_status s = bwd ? fc_cpu_weighted_sum_bwd(p) : fc_cpu_weighted_sum(p);
        fc_cpu_team_end(t);
        return s;
    }
    const fc_cuda_module *m = fc_cuda();
    if (!m) return FLASHC_ERR_BACKEND_UNAVAILABLE;
    return fc_cuda_status(m, bwd ? m->weighted_sum_bwd(p) : m->weighted_sum(p));
}

FLASHC_API flashc_status flashc_weighted_sum(const flashc_tensor *x, const flashc_tensor *w, const flashc_tensor *y,
                                             const flashc_exec_params *params) {
    fc_clear_error();
    flashc_exec_params ep;
    fc_wsum p;
    FC_TRY(fc_check_knobs());
    FC_TRY(read_params(params, &ep));
    FC_TRY(describe_x_w(x, w, &p));
    FC_TRY(fc_check_tensor(y, "y", -1, 1));
    FC_TRY(check_same_dtype(y, "y", p.dtype));
    FC_TRY(expect_outer(y, "y", x));
    p.y = y->data;
    copy_outer_strides(p.y_ostr, y, p.nouter);
    p.stream = ep.stream;
    const void *ptrs[] = {p.x, p.w, p.y};
    static const char *const names[] = {"x", "w", "y"};
    int backend;
    FC_TRY(fc_resolve_backend(ep.backend, ptrs, names, 3, &backend));
    return run(backend, 0, &p);
}

FLASHC_API flashc_status flashc_weighted_sum_bwd(const flashc_tensor *dy, const flashc_tensor *x,
                                                 const flashc_tensor *w, const flashc_tensor *dx,
                                                 const flashc_tensor *dw, const flashc_exec_params *params) {
    fc_clear_error();
    flashc_exec_params ep;
    fc_wsum p;
    FC_TRY(fc_check_knobs());
    FC_TRY(read_params(params, &ep));
    FC_TRY(describe_x_w(x, w, &p));
    FC_TRY(fc_check_tensor(dy, "dy", -1, 0));
    FC_TRY(check_same_dtype(dy, "dy", p.dtype));
    FC_TRY(expect_outer(dy, "dy", x));
    FC_RETURN_IF(!dx && !dw, FLASHC_ERR_NULL_POINTER, "dx and dw are both NULL: nothing to compute");
    p.dy = dy->data;
    copy_outer_strides(p.dy_ostr, dy, p.nouter);
    if (dx) {
        FC_TRY(fc_check_tensor(dx, "dx", x->ndim, 1));
        FC_TRY(check_same_dtype(dx, "dx", p.dtype));
        for (int i = 0; i < x->ndim; ++i)
            FC_RETURN_IF(dx->shape[i] != x->shape[i], FLASHC_ERR_SHAPE, "dx.shape[%d]=%lld must equal x.shape[%d]=%lld",
                         i, (long long)dx->shape[i], i, (long long)x->shape[i]);
        p.dx = dx->data;
        copy_outer_strides(p.dx_ostr, dx, p.nouter);
        p.dx_dstr = fc_numel(dx) == 0 ? 0 : dx->strides[x->ndim - 1];
    }
    if (dw) {
        FC_TRY(fc_check_tensor(dw, "dw", 1, 1));
        FC_TRY(check_same_dtype(dw, "dw", p.dtype));
        FC_RETURN_IF(dw->shape[0] != p.D, FLASHC_ERR_SHAPE, "dw.shape[0]=%lld must equal D=%lld",
                     (long long)dw->shape[0], (long long)p.D);
        p.dw = dw->data;
        p.dw_str = p.D == 0 ? 0 : dw->strides[0];
    }
    p.stream = ep.stream;
    const void *ptrs[] = {p.x, p.w, p.dy, p.dx, p.dw};
    static const char *const names[] = {"x", "w", "dy", "dx", "dw"};
    int backend;
    FC_TRY(fc_resolve_backend(ep.backend, ptrs, names, 5, &backend));
    return run(backend, 1, &p);
}
