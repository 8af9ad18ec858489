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

/* ------------------------------------------------ outputs that share memory
 * Do two validated tensors reach a common element? Byte ranges that do not
 * meet: no. Otherwise exact where both have the same ndim and element size
 * and, axis by axis, the same stride (an axis of extent 1 takes the other's
 * stride; a zero stride adds nothing): element i of a and j of b meet iff
 * b0 − a0 = Σ (i_k − j_k)·s_k, a bounded search over the axes from the
 * largest stride down (≤ 3 candidates a level for the nested strides of an
 * output). That tells packed layouts — q, k, v and o as slices of one
 * buffer — from aliasing. Anything else with meeting byte ranges (strides
 * that differ, a search past its budget) counts as overlap. */
static int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
    const int64_t q = a / b;
    return q - (a % b != 0 && a < 0);
}

typedef struct ov_axis {
    int64_t s, na, nb; /* |stride| (elements), extents in a and b */
} ov_axis;

static int ov_search(const ov_axis *ax, int n, const int64_t *hi_rem, const int64_t *lo_rem, int k, int64_t delta,
                     int *budget) {
    if (k == n) return delta == 0;
    if (--*budget < 0) return 1;
    const int64_t s = ax[k].s;
    /* d·s ∈ [delta − hi_rem[k], delta − lo_rem[k]], d ∈ [−(nb − 1), na − 1] */
    int64_t d0 = -floor_div(-(delta - hi_rem[k]), s), d1 = floor_div(delta - lo_rem[k], s);
    if (d0 < -(ax[k].nb - 1)) d0 = -(ax[k].nb - 1);
    if (d1 > ax[k].na - 1) d1 = ax[k].na - 1;
    for (int64_t d = d0; d <= d1; ++d)
        if (ov_search(ax, n, hi_rem, lo_rem, k + 1, delta - d * s, budget)) return 1;
    return 0;
}

static void byte_range(const flashc_tensor *t, intptr_t *lo, intptr_t *hi) {
    const int64_t isz = (int64_t)flashc_dtype_size(t->dtype);
    int64_t neg = 0, pos = 0; /* fit: fc_check_tensor bounded the span */
    for (int i = 0; i < t->ndim; ++i) {
        const int64_t r = (t->shape[i] - 1) * t->strides[i];
        if (r < 0) neg += r;
        else pos += r;
    }
    *lo = (intptr_t)t->data + (intptr_t)(neg * isz);
    *hi = (intptr_t)t->data + (intptr_t)((pos + 1) * isz);
}

/* a and b (non-empty) whose byte ranges meet: do they share an element? */
static int tensors_overlap(const flashc_tensor *a, const flashc_tensor *b) {
    const int64_t isz = (int64_t)flashc_dtype_size(a->dtype);
    if (a->ndim != b->ndim || isz != (int64_t)flashc_dtype_size(b->dtype)) return 1;
    ov_axis ax[FLASHC_MAX_DIMS];
    int n = 0;
    intptr_t a0 = (intptr_t)a->data, b0 = (intptr_t)b->data; /* then: the lowest element of each */
    for (int i = 0; i < a->ndim; ++i) {
        const int64_t ea = a->shape[i], eb = b->shape[i];
        int64_t sa = a->strides[i], sb = b->strides[i];
        if (ea == 1) sa = sb;
        if (eb == 1) sb = sa;
        if (sa != sb) return 1;
        if (sa == 0 || (ea == 1 && eb == 1)) continue;
        if (sa < 0) {
            a0 += (intptr_t)((ea - 1) * sa * isz);
            b0 += (intptr_t)((eb - 1) * sb * isz);
            sa = -sa;
        }
        int k = n++; /* insertion sort, largest stride first */
        for (; k > 0 && ax[k - 1].s < sa; --k) ax[k] = ax[k - 1];
        ax[k] = (ov_axis){sa, ea, eb};
    }
    const int64_t delta = (int64_t)(b0 - a0);
    if (delta % isz != 0) return 1;
    int64_t hi_rem[FLASHC_MAX_DIMS + 1], lo_rem[FLASHC_MAX_DIMS + 1]; /* reach of the axes after k */
    hi_rem[n] = lo_rem[n] = 0;
    for (int k = n - 1; k >= 0; --k) {
        hi_rem[k] = hi_rem[k + 1] + (ax[k].na - 1) * ax[k].s;
        lo_rem[k] = lo_rem[k + 1] - (ax[k].nb - 1) * ax[k].s;
    }
    /* ov_search reads hi_rem[k + 1] as the reach below level k: shift by one */
    int budget = 1 << 14;
    return ov_search(ax, n, hi_rem + 1, lo_rem + 1, 0, delta / isz, &budget);
}

flashc_status fc_check_disjoint(const flashc_tensor *const *t, const char *const *names, int n, int nout) {
    enum { MAXT = 20 };
    FC_RETURN_IF(n > MAXT, FLASHC_ERR_INTERNAL, "fc_check_disjoint: %d tensors, at most %d", n, (int)MAXT);
    intptr_t lo[MAXT], hi[MAXT]; /* each tensor's byte range once; absent or empty: [0, 0), meets nothing */
    for (int i = 0; i < n; ++i) {
        lo[i] = hi[i] = 0;
        if (t[i] && fc_numel(t[i]) > 0) byte_range(t[i], &lo[i], &hi[i]);
    }
    for (int i = 0; i < nout; ++i) {
        for (int j = 0; j < n; ++j) {
            if (j == i || (j < nout && j < i)) continue; /* each pair of outputs once */
            if (hi[i] <= lo[j] || hi[j] <= lo[i]) continue;
            FC_RETURN_IF(tensors_overlap(t[i], t[j]), FLASHC_ERR_INVALID_ARGUMENT,
                         "%s and %s share memory: an output must not overlap an input or another output", names[i],
                         names[j]);
        }
    }
    return FLASHC_OK;
}
