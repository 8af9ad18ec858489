/* Tensor descriptor validation shared by every op. */
#include "core.h"

static int mul_overflows(int64_t a, int64_t b, int64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

flashc_status fc_check_tensor(const flashc_tensor *t, const char *name, int ndim, int is_output) {
    FC_RETURN_IF(!t, FLASHC_ERR_NULL_POINTER, "%s: tensor descriptor is NULL", name);
    const size_t isz = flashc_dtype_size(t->dtype);
    FC_RETURN_IF(isz == 0, FLASHC_ERR_DTYPE, "%s.dtype=%d is not a flashc_dtype (0=F32, 1=F16, 2=BF16, 3=F64)",
                 name, (int)t->dtype);
    FC_RETURN_IF(t->ndim < 0 || t->ndim > FLASHC_MAX_DIMS, FLASHC_ERR_SHAPE,
                 "%s.ndim=%d is outside 0..%d", name, (int)t->ndim, FLASHC_MAX_DIMS);
    FC_RETURN_IF(ndim >= 0 && t->ndim != ndim, FLASHC_ERR_SHAPE, "%s.ndim=%d, expected %d", name,
                 (int)t->ndim, ndim);
    int64_t numel = 1, span = 0;
    for (int i = 0; i < t->ndim; ++i) {
        const int64_t n = t->shape[i], s = t->strides[i];
        FC_RETURN_IF(n < 0, FLASHC_ERR_SHAPE, "%s.shape[%d]=%lld is negative", name, i, (long long)n);
        FC_RETURN_IF(mul_overflows(numel, n, &numel), FLASHC_ERR_OVERFLOW,
                     "%s: element count overflows int64 at shape[%d]=%lld", name, i, (long long)n);
        FC_RETURN_IF(s == INT64_MIN, FLASHC_ERR_OVERFLOW, "%s.strides[%d] is INT64_MIN", name, i);
    }
    if (numel == 0) return FLASHC_OK; /* nothing is read or written: any strides will do */
    for (int i = 0; i < t->ndim; ++i)
        FC_RETURN_IF(is_output && t->shape[i] > 1 && t->strides[i] == 0, FLASHC_ERR_STRIDE,
                     "%s.strides[%d]=0 on an output axis of extent %lld: elements would alias", name, i,
                     (long long)t->shape[i]);
    for (int i = 0; i < t->ndim; ++i) {
        int64_t reach;
        const int64_t s = t->strides[i] < 0 ? -t->strides[i] : t->strides[i];
        FC_RETURN_IF(mul_overflows(t->shape[i] - 1, s, &reach) || __builtin_add_overflow(span, reach, &span),
                     FLASHC_ERR_OVERFLOW, "%s: offset of the last element overflows int64 (axis %d)", name, i);
    }
    int64_t bytes;
    FC_RETURN_IF(mul_overflows(span + 1, (int64_t)isz, &bytes), FLASHC_ERR_OVERFLOW,
                 "%s: byte offset of the last element overflows int64", name);
    FC_RETURN_IF(!t->data, FLASHC_ERR_NULL_POINTER, "%s.data is NULL", name);
    return FLASHC_OK;
}

int64_t fc_numel(const flashc_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}
