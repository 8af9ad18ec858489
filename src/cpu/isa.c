/* Run-time choice of the CPU SIMD path: cpuid for the instruction sets,
 * XGETBV for the OS saving the wider registers. Chosen once; the environment
 * variable FLASHC_CPU_ISA=scalar|avx2|avx512 caps it (for tests/benchmarks).
 * Optional extensions of a level (AVX512_BF16) are detected once too, but
 * their switch, FLASHC_CPU_BF16=0|1, is read at every call so that one test
 * process can compare both paths. */
#include "flashc_internal.h"
#include "common/knobs.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static int detect_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return FC_ISA_SCALAR;
    const int has_fma = (c >> 12) & 1, has_osxsave = (c >> 27) & 1, has_avx = (c >> 28) & 1;
    const int has_f16c = (c >> 29) & 1;
    if (!has_osxsave || !has_avx) return FC_ISA_SCALAR;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    const int os_ymm = (xlo & 0x6) == 0x6;          /* XMM | YMM state */
    const int os_zmm = (xlo & 0xe6) == 0xe6;        /* + opmask, ZMM_Hi256, Hi16_ZMM */
    if (!os_ymm) return FC_ISA_SCALAR;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return FC_ISA_SCALAR;
    const int has_avx2 = (b >> 5) & 1;
    const int has_avx512f = (b >> 16) & 1, has_avx512dq = (b >> 17) & 1;
    const int has_avx512bw = (b >> 30) & 1, has_avx512vl = (b >> 31) & 1;
    if (!has_avx2 || !has_fma || !has_f16c) return FC_ISA_SCALAR;
    if (os_zmm && has_avx512f && has_avx512dq && has_avx512bw && has_avx512vl) return FC_ISA_AVX512;
    return FC_ISA_AVX2;
#else
    return FC_ISA_SCALAR;
#endif
}

/* CPUID.(EAX=7, ECX=1):EAX bit 5: vdpbf16ps / vcvtne2ps2bf16. Only asked
 * once the AVX-512 level (and the OS's ZMM state) is known to be there. */
static int detect_bf16(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1) return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 5) & 1;
#else
    return 0;
#endif
}

/* The best level the CPU runs, detected once (benign race: every thread
 * computes the same value). */
static int cpu_isa_best(void) {
    static volatile int level = -1;
    int l = level;
    if (l < 0) {
        l = detect_isa();
        level = l;
    }
    return l;
}

/* FLASHC_CPU_ISA (knobs.h, read at every call) caps it, never raises it. */
int fc_cpu_isa_level(void) {
    const int best = cpu_isa_best(), want = fc_knob_cpu_isa();
    return want != FC_KNOB_AUTO && want < best ? want : best;
}

/* Whether vdpbf16ps beats two fp32 FMA ports. On AMD Zen 4 it doubles the
 * bf16 rate (measured 1.9x); on Intel Sapphire Rapids it issues on one port
 * only, so it has the fp32 FMA pair's FLOP rate plus packing costs (measured
 * 0.65x of the fp32-conversion path on the 16-core Xeon host, 2026-11-23). */
static int bf16_pays_off(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "AuthenticAMD" */
#else
    return 0;
#endif
}

int fc_cpu_has_avx512bf16(void) {
    static volatile int has = -1, pays = -1; /* benign races, as above */
    int h = has;
    if (h < 0) {
        h = cpu_isa_best() == FC_ISA_AVX512 && detect_bf16();
        pays = bf16_pays_off();
        has = h;
    }
    if (!h || fc_cpu_isa_level() != FC_ISA_AVX512) return 0;
    /* FLASHC_CPU_BF16=0: off; =1: on wherever the CPU has it; unset: on where it pays. */
    const int want = fc_knob_cpu_bf16();
    return want != FC_KNOB_AUTO ? want : pays;
}

/* AMX-BF16 (TDPBF16PS on the tile unit), built in (FLASHC_HAVE_AMX: the
 * compiler knows AMX) and usable here: cpuid AMX-TILE and AMX-BF16
 * (CPUID.(7,0):EDX bits 24, 22) with AVX512-BF16 (the path's softmax packs
 * with vcvtne2ps2bf16), the OS saving the tile state (XCR0 bits 17, 18), and
 * Linux's permission for this process to use it (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XTILEDATA; without it the first tile instruction
 * faults). Detected once. */
static int detect_amx(void) {
#if defined(FLASHC_HAVE_AMX) && defined(__linux__) && defined(__x86_64__)
    if (cpu_isa_best() != FC_ISA_AVX512 || !detect_bf16()) return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!((d >> 24) & 1) || !((d >> 22) & 1)) return 0;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    if ((xlo & (3u << 17)) != (3u << 17)) return 0;
    enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0;
#else
    return 0;
#endif
}

/* The AMX forward: where the CPU has it, at the AVX-512 level, unless
 * FLASHC_CPU_AMX=0 or FLASHC_CPU_BF16=0 (which turns every bf16 product
 * path off). Knobs read at every call. */
int fc_cpu_has_amx(void) {
    static volatile int has = -1; /* benign race: every thread computes the same */
    int h = has;
    if (h < 0) {
        h = detect_amx();
        has = h;
    }
    if (!h || fc_cpu_isa_level() != FC_ISA_AVX512) return 0;
    return fc_knob_cpu_amx() != 0 && fc_knob_cpu_bf16() != 0;
}

FLASHC_API const char *flashc_cpu_features(void) {
    const int bf = fc_cpu_has_avx512bf16(), amx = fc_cpu_has_amx();
    return bf && amx ? "avx512_bf16 amx_bf16" : bf ? "avx512_bf16" : amx ? "amx_bf16" : "";
}

FLASHC_API const char *flashc_cpu_isa(void) {
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    return names[fc_cpu_isa_level()];
}
