/*
 * flashc.h — the complete public ABI of flashc.
 *
 * flashc is a FlashAttention-style kernel library with two backends behind
 * this one C ABI: a CPU backend (C11 + OpenMP + AVX2/AVX-512, always
 * present) and a CUDA backend (a separately loaded module, libflashc_cuda.so,
 * opened on first use; the core library never links cudart).
 *
 * ---------------------------------------------------------------------------
 * Conventions
 * ---------------------------------------------------------------------------
 * - Every function returns a flashc_status. FLASHC_OK (0) is success. On any
 *   other status, flashc_last_error() returns a message that says precisely
 *   what was wrong ("q.shape[2]=12 is not a multiple of k.shape[2]=5"). The
 *   message is thread-local and stays valid until the next flashc_ call on
 *   the same thread. The library never aborts, exits or prints.
 * - Tensors are described by flashc_tensor: a data pointer, a dtype, a shape
 *   and strides IN ELEMENTS (not bytes). Any strides are accepted: transposed
 *   views, sliced views, negative strides, and zero strides on inputs
 *   (broadcast). Outputs must not overlap themselves — FLASHC_ERR_STRIDE:
 *   no zero stride on an axis of extent > 1, and, with the axes of extent
 *   > 1 sorted by |stride|, each |stride| must exceed the reach
 *   Σ (extent − 1)·|stride| of the smaller ones (every dense, transposed,
 *   sliced or flipped view passes). The outputs of an attention call (o,
 *   lse; dq, dk, dv, dsinks; k_cache and v_cache when rows are appended in
 *   place) must not share memory with each other or with the call's inputs
 *   (q, k, v, dout, o, lse, the caches and appended rows, sinks and the 0.1
 *   sink_logits / dsinks pointers ([Hq] contiguous), alibi_slopes, and the
 *   index tensors cu_seqlens_q/k, cache_seqlens, block_table,
 *   cache_batch_idx) — FLASHC_ERR_INVALID_ARGUMENT naming the pair.
 *   Slices of one buffer that share no element pass (q, k, v, o packed as
 *   [B, S, 4, H, D]): tensors of one ndim and element size whose strides
 *   agree axis by axis are told apart exactly; other layouts whose byte
 *   ranges meet count as overlapping.
 * - Shapes and strides are int64. Sizes whose element count or byte offsets
 *   overflow int64 are rejected with FLASHC_ERR_OVERFLOW. A tensor with a
 *   zero extent is empty: its other extents, strides and data pointer (NULL
 *   allowed) are not checked and never used.
 * - Threads: the CPU backend runs OpenMP parallel regions on the calling
 *   thread's team (omp_get_max_threads()). Before a call it checks that the
 *   address space can hold the team's thread stacks (OMP_STACKSIZE or the
 *   default pthread stack size) and shrinks the team for that call when it
 *   cannot. What remains: the OpenMP runtime itself exits the process when
 *   creating a thread fails (libgomp: "Thread creation failed"), so memory
 *   taken by another thread between that check and the parallel region can
 *   still end the process; set OMP_NUM_THREADS to bound it.
 * - Thread safety: all functions may be called concurrently from any number
 *   of threads, provided concurrent calls do not write the same memory.
 * - Pointers: on the CPU backend all pointers are host memory. On the CUDA
 *   backend all tensor pointers (and sink_logits / dsinks) are device memory
 *   (cudaMalloc, managed, or any pointer the CUDA driver reports as device
 *   accessible). FLASHC_BACKEND_AUTO picks CUDA when the pointers are device
 *   memory and CPU otherwise; mixing host and device pointers in one call is
 *   FLASHC_ERR_DEVICE_MISMATCH.
 * - Streams: the CUDA backend enqueues work on params.stream (a cudaStream_t;
 *   NULL = the legacy default stream) and returns without synchronising.
 *   Temporary device buffers are stream-ordered. Small ones (up to 1 MiB: a
 *   split decode's partial results) come from a buffer the CUDA module keeps
 *   per (device, stream) between calls, outside CUDA graph capture and for at
 *   most 64 such pairs (up to 2 MiB each, never freed while the module is
 *   loaded); cudaStreamPerThread and captures allocate per call. The CPU
 *   backend ignores stream and returns when the result is written.
 *
 * ---------------------------------------------------------------------------
 * Attention (flashc_attn_fwd / flashc_attn_bwd)
 * ---------------------------------------------------------------------------
 * Layout (the logical axis order; any strides):
 *   q    [B, Sq, Hq,  D]
 *   k, v [B, Sk, Hkv, D]
 *   o    [B, Sq, Hq,  D]    same dtype as q
 *   lse  [B, Hq, Sq]        float32 (float64 when q is F64); natural log
 * A [B, H, S, D] tensor is the same logical tensor with other strides.
 * q, k, v, o share one dtype. Hq % Hkv == 0; query head h reads key/value
 * head h / (Hq / Hkv) (GQA; MQA when Hkv = 1) — no copies are made.
 * D may be any value 1..256. Sq and Sk may differ (decode: Sq = 1); B, Sq
 * and Sk may be 0 (an empty problem: nothing is read; the backward writes
 * zero gradients for the side that is not empty, and dsinks = 0 when B = 0
 * or Sq = 0) — Hq, Hkv and D must be ≥ 1.
 *
 * Scores. The logit of query row i and key j is built in this order:
 *   1. scale:   x_ij = softmax_scale · <q_i, k_j>   (softmax_scale: finite,
 *               |softmax_scale| ≤ FLASHC_SOFTMAX_SCALE_MAX = 2^16, else
 *               FLASHC_ERR_INVALID_ARGUMENT; 0 means 1/sqrt(D), in C and in
 *               every binding)
 *   2. softcap: x_ij = c · tanh(x_ij / c)          when params.softcap = c > 0
 *               (Gemma-2, FlashAttention's softcap; 0 = off; finite, ≥ 0)
 *   3. ALiBi:   x_ij = x_ij − slope_bh · |i + Sk − Sq − j|
 *               when params.alibi_slopes is given: one fp32 slope per query
 *               head ([Hq]) or per batch and head ([B, Hq]); F64 when q is
 *               F64; any strides; bottom-right aligned like the masks;
 *               finite (checked on the CPU backend; on CUDA the slopes are
 *               device memory and not inspected).
 *   4. mask:    x_ij = −inf where key j is not visible to row i (below).
 *   5. softmax over j, with the sink logit (below) in the denominator.
 *
 * Visibility. For query row i and key column j, with offset = Sk − Sq, and
 * the window (L, R) = (window_left, window_right), −1 meaning unbounded:
 *   window:  i + offset − L ≤ j ≤ i + offset + R   (a side with −1 is open)
 *   causal:  the same as window (L, 0): j ≤ i + offset (bottom-right
 *            aligned, as FlashAttention ≥ 2.1). causal requires
 *            window_right ∈ {−1, 0}; otherwise FLASHC_ERR_INVALID_ARGUMENT.
 *   sink tokens N (StreamingLLM): keys j < N are visible to query i whenever
 *            they would be visible with window_left = −1, i.e. when
 *            j ≤ i + offset + R (R = 0 when causal; any j when R is open).
 *   sink logit s_h (GPT-OSS; params.sinks, or the 0.1 field params.sink_logits;
 *            optional): one extra logit
 *            per head in every row's softmax denominator, with no value:
 *              O_i = Σ_j e^{x_ij} v_j / (Σ_j e^{x_ij} + e^{s_h})
 *              L_i = log(Σ_j e^{x_ij} + e^{s_h})
 *   A row with no visible key: O_i = 0 and L_i = −inf (L_i = s_h when a sink
 *   logit is given). Never NaN.
 *   What a row cannot see never influences it: NaN/Inf in a masked key or
 *   value leaves the row's O and L, and its dQ (and dK/dV of the keys it
 *   does not reach), unchanged, bit for bit, on every path of both backends,
 *   forward and backward. A row that does see a non-finite key or value
 *   gets non-finite results (NaN, as a rule): a NaN score (a key with NaN,
 *   or Inf entries that make q·k NaN) gives O and L NaN, a non-finite value
 *   under finite scores a non-finite O.
 *   Range: the scale bound keeps the scale and its products with unit-sized
 *   q·k exact enough for the backward's recomputation P = exp(x − L) (its
 *   error grows as |x|·ε of the compute type). Logits that overflow the
 *   compute type (|x| > ~3e38 in fp32 for F32/F16/BF16, e.g. q and k entries
 *   of ~1e19) are outside the supported range: such a row's results are
 *   unspecified (no crash, no out-of-bounds access); the library cannot
 *   check this for device memory and does not scan host inputs for it.
 * Work is skipped by loop bounds: a sliding window costs O(window), not
 * O(Sk); no mask tensor is ever built, and the Sq×Sk score matrix is never
 * materialised.
 *
 * Precision: F32, F16 and BF16 inputs are computed with fp32 arithmetic
 * (the CUDA backend rounds P to the input type before P·V for F16/BF16, as
 * FlashAttention does) and the output is rounded to the input dtype. F32
 * never uses plain TF32: its CUDA forward (compute capability 8.0+, 16 or
 * more query rows) and backward (8.0+, D <= 128) run on the tensor cores
 * with every product split into three TF32 products (x = hi + lo, a·b ≈
 * lo·hi + hi·lo + hi·hi, as torch's memory-efficient kernel does),
 * accumulated in fp32: errors of the order of a naive fp32 implementation's. On CPUs with AVX512-BF16 or AMX-BF16 (flashc_cpu_features()),
 * the CPU forward of BF16 inputs uses bf16 products with fp32 accumulation
 * (AMX: the tile unit's TDPBF16PS, which flushes denormal inputs and
 * results to zero): S = Q·Kᵀ
 * from the inputs as given (the products are exact), the softmax in fp32,
 * and P rounded to bf16 before P·V, as on CUDA; decode-sized calls (few
 * query rows per K/V head) keep the fp32 path. The backward of F16/BF16
 * inputs on the CUDA tensor-core kernels, and of BF16 inputs on CPUs with
 * AVX512-BF16 or AMX-BF16, likewise multiplies in the input type with fp32
 * accumulation: S and dP from the inputs as given (exact products), P and
 * dS rounded to the input type before the dV, dK and dQ products. F64
 * inputs are computed in F64 (the reference precision). With a softcap, the
 * CUDA tensor-core kernels (F16/BF16) take tanh from the hardware
 * approximation (tanh.approx.f32, relative error < 2^-10.9, as FlashAttention
 * does): logits, and so L, may differ by up to about softcap·2^-10.9; every
 * other path uses a tanh accurate to its precision.
 *
 * Backward (flashc_attn_bwd) recomputes the scores from q, k and lse:
 *   P_ij = exp(x_ij − L_i) (0 when not visible), Δ_i = Σ_d dO_id · O_id,
 *   dV_j = Σ_i P_ij dO_i,  dP_ij = <dO_i, v_j>,  dS_ij = P_ij (dP_ij − Δ_i),
 *   dQ_i = scale Σ_j dS'_ij k_j,  dK_j = scale Σ_i dS'_ij q_i,
 *   dS'_ij = dS_ij · (1 − tanh²(scale·<q_i,k_j>/c)) with softcap c, else dS_ij
 *   (the ALiBi slopes get no gradient: they are constants),
 *   d s_h = −Σ_{b,i} exp(s_h − L_i) Δ_i.
 * Under GQA dk/dv are summed over the query heads sharing a K/V head.
 * dq, dk, dv have the shapes and dtype of q, k, v (any strides; they must
 * not overlap the inputs). The gradient of the sink logits is required when
 * sink logits are given: params.dsinks (a [Hq] tensor, any stride, the dtype
 * of the sinks) or, for 0.1 callers, the `dsinks` argument ([Hq],
 * contiguous); it is overwritten, not accumulated. Give one of the two.
 * Results are deterministic (bit-identical across runs and thread counts for
 * the same backend and ISA) unless params.deterministic == 0 on CUDA, where
 * the backend may accumulate dQ with float atomics when that is faster.
 *
 * ---------------------------------------------------------------------------
 * Ragged batches and KV caches (flashc_attn_varlen_fwd/_bwd, flashc_attn_kvcache_fwd)
 * ---------------------------------------------------------------------------
 * Both describe a batch of B sequences of different lengths; each sequence
 * is attended exactly as a dense call with B = 1 and its own lengths
 * (Sq_b, Sk_b) would be: every option above (causal, window, sink tokens,
 * sink logits, softcap, ALiBi, GQA) applies per sequence, bottom-right
 * aligned per sequence (offset = Sk_b − Sq_b); [B, Hq] ALiBi slopes are per
 * sequence. Sequences may be empty (length 0). Index tensors are FLASHC_I32
 * (any stride), in the memory of the call's backend.
 *
 * Packed variable-length batch (flashc_attn_varlen_fwd / _bwd):
 *   q    [Tq, Hq,  D]   the sequences' query rows packed along axis 0
 *   k, v [Tk, Hkv, D]
 *   o    [Tq, Hq,  D]
 *   lse  [Hq, Tq]       (FlashAttention's varlen layout)
 *   cu_seqlens_q, cu_seqlens_k: int32 [B + 1], B ≥ 1: sequence b owns query
 *     rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) and keys [cu_seqlens_k[b],
 *     cu_seqlens_k[b+1]); non-decreasing, cu[0] ≥ 0, cu[B] ≤ Tq (Tk).
 *   max_seqlen_q, max_seqlen_k: ≥ the longest sequence, or 0 = unknown (the
 *     library finds it; on CUDA that costs a synchronising device-to-host
 *     copy of the cu_seqlens: pass them to avoid it, e.g. under graph capture).
 *   Rows of o and lse outside every sequence are not written; the backward
 *   writes zeros into the rows of dq, dk, dv outside every sequence. The
 *   backward takes dout, o like q, lse as the forward wrote it, and the same
 *   sequences; d(sink logits) (params.dsinks) is summed over the sequences.
 *
 * KV cache (flashc_attn_kvcache_fwd), forward only:
 *   q         [B, Sn, Hq, D]    Sn new query tokens per sequence (decode: 1)
 *   k_cache, v_cache [Bc, Sc, Hkv, D]: one cache row per sequence, or with
 *             block_table the pages [P, page_size, Hkv, D]
 *   cache_seqlens   int32 [B]: tokens already in sequence b's cache (≥ 0)
 *   k_new, v_new    NULL or [B, Sk_new, Hkv, D]: written into the cache in
 *             place at positions cache_seqlens[b] .. cache_seqlens[b] +
 *             Sk_new − 1 of sequence b before attending (cache_seqlens is
 *             not updated: the caller advances it, as FlashAttention's
 *             flash_attn_with_kvcache does). Both or neither.
 *   cache_batch_idx NULL or int32 [B]: sequence b uses cache row
 *             cache_batch_idx[b] (in [0, Bc)); not with block_table.
 *   block_table     NULL or int32 [B, max_pages]: position t of sequence b
 *             is row t % page_size of page block_table[b, t / page_size]
 *             (in [0, P)); entries past the sequence's last page are never
 *             read. Any page_size ≥ 1 (the CUDA fast paths take multiples of 16).
 *   o [B, Sn, Hq, D], lse [B, Hq, Sn] (may be NULL).
 *   Sequence b attends to its keys 0 .. Sk_b − 1, Sk_b = cache_seqlens[b] +
 *   Sk_new, which must fit the cache (Sk_b ≤ Sc, or ≤ max_pages·page_size).
 *   Cache positions ≥ Sk_b are never read: garbage (NaN, Inf) there has no
 *   effect.
 *
 * Validation of index tensors: on the CPU backend every value is checked
 * (FLASHC_ERR_INVALID_ARGUMENT naming the entry: a decreasing cu_seqlens, a
 * length past the cache or the packed tensor, a page id out of range, a
 * block table too short, a cache_batch_idx out of range). On CUDA the index
 * tensors are device memory and are not inspected on the host (that would
 * synchronise): the kernels clamp every index they derive from them, so an
 * invalid value never reads or writes out of bounds, but the results of
 * such a sequence are unspecified.
 *
 * ---------------------------------------------------------------------------
 * Weighted row-sum (flashc_weighted_sum / flashc_weighted_sum_bwd)
 * ---------------------------------------------------------------------------
 *   x  [..., D]  (ndim 1..FLASHC_MAX_DIMS, any strides)
 *   w  [D]
 *   y  [...]     (x.shape without its last axis; ndim 0 allowed when x is 1-D)
 *   y[r] = Σ_d x[r, d] · w[d]
 * Backward: dx[r, d] = dy[r] · w[d];  dw[d] = Σ_r dy[r] · x[r, d].
 * dw is reduced through per-block partial buffers in a fixed order: no
 * atomics, bit-identical across runs and thread counts. x, w, y (and dy, dx,
 * dw) share one dtype; accumulation is fp32 (F64 in F64). In the backward,
 * dx or dw may be NULL to skip that output (not both).
 */
#ifndef FLASHC_H
#define FLASHC_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ version */
/* The one source of the version: CMakeLists.txt and pyproject.toml read these
 * three macros; flashc.__version__ asks the loaded library. */
#define FLASHC_VERSION_MAJOR 0
#define FLASHC_VERSION_MINOR 2
#define FLASHC_VERSION_PATCH 0
#define FLASHC_VERSION_NUMBER \
    (FLASHC_VERSION_MAJOR * 10000 + FLASHC_VERSION_MINOR * 100 + FLASHC_VERSION_PATCH)
#define FLASHC_STRINGIFY_(x) #x
#define FLASHC_STRINGIFY(x) FLASHC_STRINGIFY_(x)
#define FLASHC_VERSION_STRING                                                 \
    FLASHC_STRINGIFY(FLASHC_VERSION_MAJOR) "." FLASHC_STRINGIFY(              \
        FLASHC_VERSION_MINOR) "." FLASHC_STRINGIFY(FLASHC_VERSION_PATCH)

/* ------------------------------------------------------------------- export */
#if defined(FLASHC_BUILDING)
#  if defined(_WIN32)
#    define FLASHC_API __declspec(dllexport)
#  else
#    define FLASHC_API __attribute__((visibility("default")))
#  endif
#elif defined(_WIN32)
#  define FLASHC_API __declspec(dllimport)
#else
#  define FLASHC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------- status */
/* Values are pinned: never renumbered, only appended. */
typedef enum flashc_status {
    FLASHC_OK = 0,
    FLASHC_ERR_INVALID_ARGUMENT = 1,   /* a value out of range (window < -1, D > 256, …) */
    FLASHC_ERR_NULL_POINTER = 2,       /* a required pointer is NULL */
    FLASHC_ERR_SHAPE = 3,              /* shapes disagree, ndim wrong, extent < 0 */
    FLASHC_ERR_DTYPE = 4,              /* unknown dtype or dtypes that must match don't */
    FLASHC_ERR_STRIDE = 5,             /* an output with a zero stride on an extent > 1 axis */
    FLASHC_ERR_OVERFLOW = 6,           /* an element count or offset overflows int64 */
    FLASHC_ERR_UNSUPPORTED = 7,        /* valid, but not implemented by this backend */
    FLASHC_ERR_BACKEND_UNAVAILABLE = 8,/* backend not built, module/driver/GPU missing */
    FLASHC_ERR_OUT_OF_MEMORY = 9,      /* host or device allocation failed */
    FLASHC_ERR_CUDA = 10,              /* a CUDA runtime/driver call or launch failed */
    FLASHC_ERR_PARAMS_SIZE = 11,       /* params.struct_size is not one this library knows */
    FLASHC_ERR_DEVICE_MISMATCH = 12,   /* host and device pointers mixed in one call */
    FLASHC_ERR_INTERNAL = 13           /* a bug in flashc: please report */
} flashc_status;

/* "FLASHC_OK", "FLASHC_ERR_SHAPE", … ; "FLASHC_ERR_UNKNOWN" for other values. */
FLASHC_API const char *flashc_status_string(int status);
/* Thread-local message of the last failed call on this thread ("" if none). */
FLASHC_API const char *flashc_last_error(void);

FLASHC_API const char *flashc_version_string(void); /* "0.2.0" */
FLASHC_API int flashc_version_number(void);         /* 200 */

/* ----------------------------------------------------------- dtype, backend */
typedef enum flashc_dtype {
    FLASHC_F32 = 0,
    FLASHC_F16 = 1,  /* IEEE binary16 */
    FLASHC_BF16 = 2, /* bfloat16 */
    FLASHC_F64 = 3,
    FLASHC_I32 = 4   /* int32: index tensors only (cu_seqlens, cache_seqlens, block_table, …) */
} flashc_dtype;

/* Bytes per element of a dtype, 0 for an unknown value. */
FLASHC_API size_t flashc_dtype_size(int dtype);

typedef enum flashc_backend {
    FLASHC_BACKEND_AUTO = 0, /* CUDA when the pointers are device memory, else CPU */
    FLASHC_BACKEND_CPU = 1,
    FLASHC_BACKEND_CUDA = 2
} flashc_backend;

/* 1 when the backend can run here, 0 when not: flashc_last_error() then reads
 * "CUDA backend unavailable: <why>", <why> one of "CUDA module not built
 * (FLASHC_CUDA=OFF, or nvcc missing at build time)", "cannot load the module
 * (…)", "no CUDA driver (…)", "CUDA driver too old: …", "no CUDA device (…)",
 * "CUDA device N has compute capability …". AUTO and CPU are always
 * available. */
FLASHC_API int flashc_backend_available(int backend);

/* The CPU SIMD path in use: "scalar", "avx2" or "avx512". Chosen once by
 * cpuid + XGETBV; FLASHC_CPU_ISA=scalar|avx2|avx512 in the environment forces
 * one (a path the CPU cannot run falls back to the best it can; another value
 * is ignored here and refused by the compute calls, see "Environment"). */
FLASHC_API const char *flashc_cpu_isa(void);

/* Optional instruction-set extensions the CPU paths use on top of
 * flashc_cpu_isa(), space separated ("" when none). Today one:
 *   "avx512_bf16"  cpuid AVX512_BF16 with the avx512 path: the BF16 forward
 *                  uses vdpbf16ps (bf16 products, fp32 accumulation; see
 *                  Precision). On by default only where it is faster than
 *                  the fp32 path (AMD; on Intel it issues on one port and
 *                  measured slower). FLASHC_CPU_BF16=0 in the environment
 *                  turns it off (BF16 then runs the fp32-conversion path),
 *                  =1 on wherever the CPU has it.
 *   "amx_bf16"     cpuid AMX-TILE and AMX-BF16, the OS saving the tile state
 *                  and granting it to the process (Linux arch_prctl), with
 *                  the avx512 path: the BF16 forward runs S = Q·Kᵀ and P·V,
 *                  and the backward its five tile products, on the tile unit
 *                  (same precision as avx512_bf16; 2-3x the fp32-conversion
 *                  path's speed, measured). On by default;
 *                  FLASHC_CPU_AMX=0 turns it off, and so does
 *                  FLASHC_CPU_BF16=0 (every bf16-product path off). */
FLASHC_API const char *flashc_cpu_features(void);

/* Environment. flashc reads these variables (all optional; one policy for
 * all: read at every call that consults them, so a test may change one
 * between calls; unset or empty means "auto"). A value a variable does not
 * accept is an error, not "auto": flashc_attn_fwd/bwd and
 * flashc_weighted_sum/_bwd then return FLASHC_ERR_INVALID_ARGUMENT with a
 * message naming the variable and its accepted values (the info calls
 * flashc_cpu_isa()/flashc_cpu_features() cannot fail and ignore it). They
 * exist for tests and benchmarks; results are valid under every setting.
 *   FLASHC_CPU_ISA=scalar|avx2|avx512  cap the CPU SIMD path (never above what the CPU runs)
 *   FLASHC_CPU_BF16=0|1                AVX512-BF16 paths off / on (see flashc_cpu_features);
 *                                      0 turns the AMX path off too
 *   FLASHC_CPU_AMX=0|1                 the AMX-BF16 forward off / on (default on where present)
 *   FLASHC_CPU_DECODE_ROWS=n           CPU forward: decode path up to n query rows per
 *                                      (batch, kv head); 0 = never; capped at 64
 *   FLASHC_CPU_BWD=twopass             CPU backward: force the two-pass (key-major) schedule
 *   FLASHC_CUDA_KERNEL=generic|mma     CUDA attention: generic SIMT kernels only, or skip the
 *                                      Hopper wgmma and TMA kernels (mma.sync, then generic)
 *   FLASHC_CUDA_SMEM_LIMIT=n           CUDA attention: plan as if a block could use at most n bytes
 *                                      of shared memory (min with the device's opt-in limit), to
 *                                      test what a GPU with less runs (sm_86/89: 99 KB, 101376;
 *                                      48 KB, 49152). Kernels and tile shapes are chosen from this
 *                                      limit; every problem runs down to 48 KB
 *   FLASHC_CUDA_POISON_SCRATCH=0|1     CUDA: 1 fills every scratch buffer a call takes (the
 *                                      backward's fp32 dQ accumulator, Δ, split-KV partials, the
 *                                      weighted sum's partials) with 0xFF bytes (NaN) before its
 *                                      kernels run, so that a kernel reading scratch it did not
 *                                      write shows in the results (tests); one memset a buffer
 *   FLASHC_CUDA_MODULE=path            the CUDA module to load (default: libflashc_cuda.so
 *                                      beside libflashc.so); read once, at the first load
 *   FLASHC_WSUM_VARIANT=0|1            CUDA weighted sum: 0 = generic kernels only; 1 = auto */

/* The largest |params.softmax_scale| accepted (flashc.h, "Scores"). */
#define FLASHC_SOFTMAX_SCALE_MAX 65536.0

/* ------------------------------------------------------------------- tensor */
#define FLASHC_MAX_DIMS 8

typedef struct flashc_tensor {
    void *data;                         /* first element (offset 0 of every axis) */
    int32_t dtype;                      /* flashc_dtype */
    int32_t ndim;                       /* 0..FLASHC_MAX_DIMS */
    int64_t shape[FLASHC_MAX_DIMS];     /* extents; entries ≥ ndim ignored */
    int64_t strides[FLASHC_MAX_DIMS];   /* in ELEMENTS, may be 0 or negative */
} flashc_tensor;

/* ------------------------------------------------------------------- params */
/* Every params struct starts with struct_size = sizeof(itself) as compiled by
 * the caller, and is initialised by its *_default() function. New fields
 * are only ever appended; the library accepts any struct_size it knows
 * (older callers get defaults for fields they lack) and rejects others with
 * FLASHC_ERR_PARAMS_SIZE. Bindings check their mirror against
 * flashc_*_params_size(). */

typedef struct flashc_attn_params {
    uint32_t struct_size;      /* = sizeof(flashc_attn_params) */
    int32_t backend;           /* flashc_backend; default AUTO */
    double softmax_scale;      /* 0 → 1/sqrt(D) */
    int32_t causal;            /* 0/1: window (L, 0), bottom-right aligned */
    int32_t deterministic;     /* bwd: 1 (default) = bit-reproducible */
    int64_t window_left;       /* −1 = unbounded (default) */
    int64_t window_right;      /* −1 = unbounded (default) */
    int64_t num_sink_tokens;   /* ≥ 0; keys [0, N) always visible (see above) */
    const void *sink_logits;   /* legacy (0.1): NULL or [Hq] contiguous sink logits, float32
                                  (float64 when q is F64); prefer `sinks` below */
    void *stream;              /* cudaStream_t on CUDA (NULL = legacy default) */
    /* ---- appended in 0.2. A caller compiled against 0.1 passes
     * struct_size = FLASHC_ATTN_PARAMS_SIZE_V1 and gets the defaults. ---- */
    double softcap;            /* 0 = off (default); > 0: x = softcap·tanh(x / softcap) */
    const flashc_tensor *alibi_slopes; /* NULL = off; [Hq] or [B, Hq], F32 (F64 when q is F64) */
    const flashc_tensor *sinks;  /* NULL, or the sink logits s_h as a [Hq] tensor (any stride),
                                    F32 (F64 when q is F64); not together with sink_logits */
    const flashc_tensor *dsinks; /* bwd: the gradient of the sink logits, [Hq], dtype of the
                                    sinks, overwritten; not together with the dsinks argument */
} flashc_attn_params;

/* sizeof(flashc_attn_params) in 0.1 (up to and including `stream`). */
#define FLASHC_ATTN_PARAMS_SIZE_V1 ((uint32_t)offsetof(flashc_attn_params, softcap))

FLASHC_API flashc_attn_params flashc_attn_params_default(void);
FLASHC_API size_t flashc_attn_params_size(void);

typedef struct flashc_exec_params {
    uint32_t struct_size;      /* = sizeof(flashc_exec_params) */
    int32_t backend;           /* flashc_backend; default AUTO */
    void *stream;              /* cudaStream_t on CUDA (NULL = legacy default) */
} flashc_exec_params;

FLASHC_API flashc_exec_params flashc_exec_params_default(void);
FLASHC_API size_t flashc_exec_params_size(void);

/* ---------------------------------------------------------------- attention */
/* o = attention(q, k, v); lse may be NULL when the caller does not need it.
 * params may be NULL (defaults). Shapes and semantics: see the top of file. */
FLASHC_API flashc_status flashc_attn_fwd(const flashc_tensor *q,
                                         const flashc_tensor *k,
                                         const flashc_tensor *v,
                                         const flashc_tensor *o,
                                         const flashc_tensor *lse,
                                         const flashc_attn_params *params);

/* Gradients of attention by recomputation from lse. dout, o like q; lse as
 * the forward wrote it (same params!). dq, dk, dv required. dsinks: see top. */
FLASHC_API flashc_status flashc_attn_bwd(const flashc_tensor *dout,
                                         const flashc_tensor *q,
                                         const flashc_tensor *k,
                                         const flashc_tensor *v,
                                         const flashc_tensor *o,
                                         const flashc_tensor *lse,
                                         const flashc_tensor *dq,
                                         const flashc_tensor *dk,
                                         const flashc_tensor *dv,
                                         void *dsinks,
                                         const flashc_attn_params *params);

/* ------------------------------------------ ragged batches and KV caches */
/* See "Ragged batches and KV caches" at the top. The structs follow the
 * params convention (struct_size, *_default(), fields only appended). */
typedef struct flashc_varlen {
    uint32_t struct_size;               /* = sizeof(flashc_varlen) */
    const flashc_tensor *cu_seqlens_q;  /* int32 [B + 1] */
    const flashc_tensor *cu_seqlens_k;  /* int32 [B + 1] */
    int64_t max_seqlen_q;               /* ≥ the longest query sequence; 0 = unknown */
    int64_t max_seqlen_k;               /* ≥ the longest key sequence; 0 = unknown */
} flashc_varlen;

FLASHC_API flashc_varlen flashc_varlen_default(void);

/* q [Tq, Hq, D], k, v [Tk, Hkv, D] → o [Tq, Hq, D], lse [Hq, Tq] (may be NULL). */
FLASHC_API flashc_status flashc_attn_varlen_fwd(const flashc_tensor *q,
                                                const flashc_tensor *k,
                                                const flashc_tensor *v,
                                                const flashc_varlen *seqs,
                                                const flashc_tensor *o,
                                                const flashc_tensor *lse,
                                                const flashc_attn_params *params);

/* Gradients of flashc_attn_varlen_fwd. d(sink logits) through params.dsinks. */
FLASHC_API flashc_status flashc_attn_varlen_bwd(const flashc_tensor *dout,
                                                const flashc_tensor *q,
                                                const flashc_tensor *k,
                                                const flashc_tensor *v,
                                                const flashc_tensor *o,
                                                const flashc_tensor *lse,
                                                const flashc_varlen *seqs,
                                                const flashc_tensor *dq,
                                                const flashc_tensor *dk,
                                                const flashc_tensor *dv,
                                                const flashc_attn_params *params);

typedef struct flashc_kvcache {
    uint32_t struct_size;                  /* = sizeof(flashc_kvcache) */
    const flashc_tensor *k_cache;          /* [Bc, Sc, Hkv, D], or pages [P, page_size, Hkv, D] */
    const flashc_tensor *v_cache;          /* like k_cache */
    const flashc_tensor *cache_seqlens;    /* int32 [B], required */
    const flashc_tensor *k_new;            /* NULL or [B, Sk_new, Hkv, D], appended in place */
    const flashc_tensor *v_new;            /* like k_new */
    const flashc_tensor *cache_batch_idx;  /* NULL or int32 [B] */
    const flashc_tensor *block_table;      /* NULL or int32 [B, max_pages]: paged cache */
} flashc_kvcache;

FLASHC_API flashc_kvcache flashc_kvcache_default(void);

/* q [B, Sn, Hq, D] against the cache (after appending k_new/v_new) →
 * o [B, Sn, Hq, D], lse [B, Hq, Sn] (may be NULL). */
FLASHC_API flashc_status flashc_attn_kvcache_fwd(const flashc_tensor *q,
                                                 const flashc_kvcache *cache,
                                                 const flashc_tensor *o,
                                                 const flashc_tensor *lse,
                                                 const flashc_attn_params *params);

/* --------------------------------------------------------- weighted row-sum */
FLASHC_API flashc_status flashc_weighted_sum(const flashc_tensor *x,
                                             const flashc_tensor *w,
                                             const flashc_tensor *y,
                                             const flashc_exec_params *params);

FLASHC_API flashc_status flashc_weighted_sum_bwd(const flashc_tensor *dy,
                                                 const flashc_tensor *x,
                                                 const flashc_tensor *w,
                                                 const flashc_tensor *dx,
                                                 const flashc_tensor *dw,
                                                 const flashc_exec_params *params);

/* ------------------------------------------------- CUDA device memory helpers
 * Small helpers so that a caller with nothing but ctypes can run on the GPU.
 * All return FLASHC_ERR_BACKEND_UNAVAILABLE when the CUDA backend is not.
 * They act on the current device of the calling thread. */
typedef enum flashc_memcpy_kind {
    FLASHC_MEMCPY_HOST_TO_DEVICE = 1,
    FLASHC_MEMCPY_DEVICE_TO_HOST = 2,
    FLASHC_MEMCPY_DEVICE_TO_DEVICE = 3
} flashc_memcpy_kind;

FLASHC_API flashc_status flashc_cuda_device_count(int *count);
/* Writes the NUL-terminated device name into buf (truncated to len). */
FLASHC_API flashc_status flashc_cuda_device_name(int device, char *buf, size_t len);
FLASHC_API flashc_status flashc_cuda_set_device(int device);
FLASHC_API flashc_status flashc_cuda_malloc(void **ptr, size_t bytes);
FLASHC_API flashc_status flashc_cuda_free(void *ptr); /* NULL is a no-op */
/* Synchronous with respect to the host (cudaMemcpy semantics). */
FLASHC_API flashc_status flashc_cuda_memcpy(void *dst, const void *src,
                                            size_t bytes, int kind);
FLASHC_API flashc_status flashc_cuda_synchronize(void);
/* Orders work submitted to `stream` after this call behind all work already
 * submitted to `producer` (an event recorded on producer, waited on by
 * stream); asynchronous for the host, a no-op when both are the same stream.
 * Both are cudaStream_t values: NULL or (void *)1 = the legacy default
 * stream, (void *)2 = the per-thread default stream. Bindings use it to honour
 * the stream an input was produced on (__cuda_array_interface__ v3 "stream",
 * __cuda_stream__) before running on the call's params.stream. */
FLASHC_API flashc_status flashc_cuda_stream_wait(void *stream, void *producer);
/* *is_device = 1 when ptr is device-accessible memory, 0 for host memory
 * (also when the CUDA backend is unavailable: then every pointer is host). */
FLASHC_API flashc_status flashc_pointer_is_device(const void *ptr, int *is_device);

#ifdef __cplusplus
}
#endif
#endif /* FLASHC_H */
