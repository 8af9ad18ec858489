/* Tensor descriptor validation shared by every op. */
#include "core.h"


static int mul_overflows(int64_t a, int64_t b, int64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

/* Axes of extent > 1 sorted by |stride| (insertion sort: ndim ≤ 8). */
typedef struct axis_ext {
    int64_t n, s; /* extent, |stride| */
    int i;
} axis_ext;

/* Do two distinct indices of the output t reach the same element? With the
 * axes of extent > 1 sorted by |stride|, t is free of self-overlap when each
 * |stride| exceeds the reach Σ (n − 1)·|stride| of the axes before it (the
 * usual sufficient test: it also refuses a few interleaved layouts that do
 * not overlap, e.g. shape (2, 2) strides (3, 2), which no framework makes).
 * Called after the offsets are known to fit int64. Returns the axis that
 * overlaps, −1 when none. */
static int self_overlap_axis(const flashc_tensor *t) {
    axis_ext ax[FLASHC_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; ++i) {
        if (t->shape[i] <= 1) continue;
        const axis_ext e = {t->shape[i], t->strides[i] < 0 ? -t->strides[i] : t->strides[i], i};
        int k = n++;
        for (; k > 0 && ax[k - 1].s > e.s; --k) ax[k] = ax[k - 1];
        ax[k] = e;
    }
    int64_t reach = 0; /* fits: at most the last element's offset */
    for (int k = 0; k < n; ++k) {
        if (ax[k].s <= reach) return ax[k].i;
        reach += (ax[k].n - 1) * ax[k].s;
    }
    return -1;
}

flashc_status fc_check_tensor(const flashc_tensor *t, const char *name, int ndim, int is_output) {
    FC_RETURN_IF(!t, FLASHC_ERR_NULL_POINTER, "%s: tensor descriptor is NULL", name);
    const size_t isz = flashc_dtype_size(t->dtype);
    FC_RETURN_IF(isz == 0, FLASHC_ERR_DTYPE, "%s.dtype=%d is not a flashc_dtype (0=F32, 1=F16, 2=BF16, 3=F64, 4=I32)",
                 name, (int)t->dtype);
    FC_RETURN_IF(t->ndim < 0 || t->ndim > FLASHC_MAX_DIMS, FLASHC_ERR_SHAPE,
                 "%s.ndim=%d is outside 0..%d", name, (int)t->ndim, FLASHC_MAX_DIMS);
    FC_RETURN_IF(ndim >= 0 && t->ndim != ndim, FLASHC_ERR_SHAPE, "%s.ndim=%d, expected %d", name,
                 (int)t->ndim, ndim);
    int empty = 0;
    for (int i = 0; i < t->ndim; ++i) {
        FC_RETURN_IF(t->shape[i] < 0, FLASHC_ERR_SHAPE, "%s.shape[%d]=%lld is negative", name, i,
                     (long long)t->shape[i]);
        FC_RETURN_IF(t->strides[i] == INT64_MIN, FLASHC_ERR_OVERFLOW, "%s.strides[%d] is INT64_MIN", name, i);
        empty |= t->shape[i] == 0;
    }
    /* An empty tensor has 0 elements whatever its other extents (so the
     * answer does not depend on the axis order), and nothing is read or
     * written: any strides will do. The core never forms offsets from an
     * empty tensor's strides (it zeroes them in the problem it builds). */
    if (empty) return FLASHC_OK;
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; ++i)
        FC_RETURN_IF(mul_overflows(numel, t->shape[i], &numel), FLASHC_ERR_OVERFLOW,
                     "%s: element count overflows int64 at shape[%d]=%lld", name, i, (long long)t->shape[i]);
    for (int i = 0; i < t->ndim; ++i)
        FC_RETURN_IF(is_output && t->shape[i] > 1 && t->strides[i] == 0, FLASHC_ERR_STRIDE,
                     "%s.strides[%d]=0 on an output axis of extent %lld: elements would alias", name, i,
                     (long long)t->shape[i]);
    int64_t span = 0; /* offset of the farthest element from data, in elements */
    for (int i = 0; i < t->ndim; ++i) {
        int64_t reach;
        const int64_t s = t->strides[i] < 0 ? -t->strides[i] : t->strides[i];
        FC_RETURN_IF(mul_overflows(t->shape[i] - 1, s, &reach) || __builtin_add_overflow(span, reach, &span),
                     FLASHC_ERR_OVERFLOW, "%s: offset of the last element overflows int64 (axis %d)", name, i);
    }
    int64_t elems, bytes;
    FC_RETURN_IF(__builtin_add_overflow(span, (int64_t)1, &elems) || mul_overflows(elems, (int64_t)isz, &bytes),
                 FLASHC_ERR_OVERFLOW, "%s: byte offset of the last element overflows int64", name);
    if (is_output) {
        const int ax = self_overlap_axis(t);
        FC_RETURN_IF(ax >= 0, FLASHC_ERR_STRIDE,
                     "%s.strides[%d]=%lld: the output overlaps itself (sorted by |stride|, each axis's stride "
                     "must exceed the reach of the smaller ones)",
                     name, ax, (long long)t->strides[ax]);
    }
    FC_RETURN_IF(!t->data, FLASHC_ERR_NULL_POINTER, "%s.data is NULL", name);
    return FLASHC_OK;
}

flashc_status fc_check_float_tensor(const flashc_tensor *t, const char *name, int ndim, int is_output,
                                    const char *op) {
    FC_TRY(fc_check_tensor(t, name, ndim, is_output));
    FC_RETURN_IF(t->dtype == FLASHC_I32, FLASHC_ERR_DTYPE,
                 "%s.dtype=I32: %s takes F32, F16, BF16 or F64 tensors (I32, int32, is for index tensors only)",
                 name, op);
    return FLASHC_OK;
}

flashc_status fc_check_index_tensor(const flashc_tensor *t, const char *name, int ndim) {
    FC_TRY(fc_check_tensor(t, name, ndim, 0));
    FC_RETURN_IF(t->dtype != FLASHC_I32, FLASHC_ERR_DTYPE, "%s.dtype=%s, expected I32 (int32): an index tensor", name,
                 fc_dtype_name(t->dtype));
    return FLASHC_OK;
}

int64_t fc_numel(const flashc_tensor *t) {
    for (int i = 0; i < t->ndim; ++i)
        if (t->shape[i] == 0) return 0; /* first: the other extents of an empty tensor are unchecked */
    int64_t n = 1;
    for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}
