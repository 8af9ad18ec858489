# Generates the wgmma wrappers of attn_wgmma.cuh: python3 gen_wgmma_wrappers.py
def ss(n, ty, tt=False, tb=False):
    nacc = n // 2
    regs = ", ".join("%%%d" % i for i in range(nacc))
    outs = ", ".join('"+f"(d[%d])' % i for i in range(nacc))
    s = []
    s.append("template <> __device__ __forceinline__ void WgOps<%s>::ss_n%d%s(float *d, uint64_t da, uint64_t db, int scale_d) {" % (ty[0], n, "_tt" if tt else "_tb" if tb else ""))
    s.append('    asm volatile(')
    s.append('        "{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"' % (nacc + 2))
    s.append('        "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s "' % (n, ty[1], ty[1]))
    # split regs list in lines
    items = ["%%%d" % i for i in range(nacc)]
    lines = [", ".join(items[i:i+16]) for i in range(0, nacc, 16)]
    s.append('        "{"')
    for li, l in enumerate(lines):
        s.append('        "%s%s"' % (l, "," if li < len(lines) - 1 else ""))
    s.append('        "}, %%%d, %%%d, p, 1, 1, %s;\\n}\\n"' % (nacc, nacc + 1, "1, 1" if tt else "0, 1" if tb else "0, 0"))
    ol = ['"+f"(d[%d])' % i for i in range(nacc)]
    s.append('        : ' + ",\n          ".join(", ".join(ol[i:i+8]) for i in range(0, nacc, 8)))
    s.append('        : "l"(da), "l"(db), "r"(scale_d));')
    s.append("}")
    return "\n".join(s)

def rs(n, ty):
    nacc = n // 2
    items = ["%%%d" % i for i in range(nacc)]
    lines = [", ".join(items[i:i+16]) for i in range(0, nacc, 16)]
    s = []
    s.append("template <> __device__ __forceinline__ void WgOps<%s>::rs_n%d_tb(float *d, const uint32_t *a, uint64_t db) {" % (ty[0], n))
    s.append('    asm volatile(')
    s.append('        "{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"' % (nacc + 5))
    s.append('        "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s "' % (n, ty[1], ty[1]))
    s.append('        "{"')
    for li, l in enumerate(lines):
        s.append('        "%s%s"' % (l, "," if li < len(lines) - 1 else ""))
    s.append('        "}, {%%%d, %%%d, %%%d, %%%d}, %%%d, p, 1, 1, 1;\\n}\\n"' % (nacc, nacc+1, nacc+2, nacc+3, nacc+4))
    ol = ['"+f"(d[%d])' % i for i in range(nacc)]
    s.append('        : ' + ",\n          ".join(", ".join(ol[i:i+8]) for i in range(0, nacc, 8)))
    s.append('        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));')
    s.append("}")
    return "\n".join(s)

out = []
for ty in (("__nv_bfloat16", "bf16"), ("__half", "f16")):
    out.append(ss(128, ty))
    out.append(ss(176, ty))  # S = Q·Kᵀ over 176-key tiles (forward, HD 128, every row seeing every key)
    out.append(ss(112, ty))  # S = Q·Kᵀ over 112-key tiles (forward, HD 192)
    out.append(ss(80, ty))   # ... over 80-key tiles (forward, HD 256)
    out.append(ss(128, ty, tb=True))
    out.append(ss(64, ty))
    out.append(ss(64, ty, tt=True))
    out.append(ss(64, ty, tb=True))
    out.append(ss(32, ty))
    out.append(ss(32, ty, tt=True))
    out.append(ss(32, ty, tb=True))
    for n in (64, 80, 96, 128, 192, 256):
        out.append(rs(n, ty))
print("\n\n".join(out))
