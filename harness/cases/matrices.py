"""The named shape matrices. One function per matrix, registered in ``MATRICES``.

Shapes come from the seed note (TinyLoop's 2B model: D=2048, FFN=8192) and from the
dispatcher's preconditions (BT >= 16, K % 128 == 0, N % 128 == 0, Marlin's N % 256 for
M > 16, group_size == K translated to -1, the vocab head N = 50257).
"""

from __future__ import annotations

from .case import GemmCase
from .registry import MATRICES

#: TinyLoop 2B projections: (name, N, K). mlp_gate and mlp_up share a shape (one case).
PRODUCTION_LAYERS = (
    ("attn_qkv", 6144, 2048),
    ("attn_out", 2048, 2048),
    ("mlp_gate", 8192, 2048),
    ("mlp_up", 8192, 2048),
    ("mlp_down", 2048, 8192),
)
PRODUCTION_BT = (1, 16, 32, 64, 128, 256, 1024)


def _merge(cases: list[GemmCase]) -> list[GemmCase]:
    """Merge cases with the same id (same shape and seed), uniting their tags."""
    out: dict[str, GemmCase] = {}
    for c in cases:
        out[c.id] = out[c.id].with_tags(*c.tags) if c.id in out else c
    return list(out.values())


@MATRICES.register("production", "TinyLoop 2B projections x BT {1..1024} x {per-row, g128}")
def production() -> list[GemmCase]:
    cases = []
    for layer, n, k in PRODUCTION_LAYERS:
        for gs in (k, 128):
            for bt in PRODUCTION_BT:
                cases.append(GemmCase(M=bt, N=n, K=k, group_size=gs, tags=(layer,)))
    return _merge(cases)


@MATRICES.register(
    "swiglu",
    "SwiGLU gate/up pairs of the 2B MLP (N 8192, K 2048) x BT {1..1024} x {per-row, g128}",
)
def swiglu() -> list[GemmCase]:
    """TinyLoop's ``quant_swiglu`` shape as one pair case (two weights, SiLU x mul): run as
    the fused native kernel and as a pair of calls of every path
    (``harness.kernels.swiglu_pair``)."""
    n, k = next((n, k) for layer, n, k in PRODUCTION_LAYERS if layer == "mlp_gate")
    return [GemmCase(M=bt, N=n, K=k, group_size=gs, tags=("mlp_gate_up",), kind="swiglu_pair")
            for gs in (k, 128) for bt in PRODUCTION_BT]


@MATRICES.register(
    "parity", "the seed's parity chain: 3 sym-packer, 4 py-correction, 5 kernel, 7 wrapper"
)
def parity() -> list[GemmCase]:
    def c(m, n, k, gs, stage):
        return GemmCase(M=m, N=n, K=k, group_size=gs, seed=1, tags=(stage,))

    pack_sym = [c(16, 256, 256, 128, "pack_sym"), c(1, 512, 1024, 1024, "pack_sym"),
                c(64, 1024, 2048, 128, "pack_sym")]
    py_corr = [c(3, 128, 256, 128, "py_correction"), c(17, 384, 512, 64, "py_correction"),
               c(8, 256, 384, 384, "py_correction"), c(33, 256, 1024, 128, "py_correction")]
    kernel = [c(1, 128, 256, 128, "corr_kernel"), c(5, 256, 1024, 1024, "corr_kernel"),
              c(16, 384, 2048, 128, "corr_kernel"), c(31, 1024, 4096, 128, "corr_kernel"),
              c(100, 2048, 8192, 128, "corr_kernel")]
    wrapper = [c(16, 256, 256, 128, "mm_asym"), c(16, 512, 1024, 1024, "mm_asym"),
               c(20, 512, 1024, 128, "mm_asym"), c(32, 512, 2048, 128, "mm_asym"),
               c(48, 1024, 4096, 128, "mm_asym"), c(64, 1024, 2048, 2048, "mm_asym"),
               c(64, 2048, 8192, 128, "mm_asym")]
    return _merge(pack_sym + py_corr + kernel + wrapper)


@MATRICES.register("edges", "every dispatcher precondition on both sides of its boundary")
def edges() -> list[GemmCase]:
    def c(m, n, k, gs, *tags):
        return GemmCase(M=m, N=n, K=k, group_size=gs, seed=2, tags=tags)

    return _merge([
        c(15, 2048, 2048, 128, "bt_below_16"),
        c(16, 2048, 2048, 128, "bt_16"),
        c(16, 2048, 2112, 2112, "k_not_mult_128"),       # per-row, K % 128 = 64
        c(16, 2048, 2176, 128, "k_mult_128"),            # K = 17 * 128
        c(16, 2112, 2048, 128, "n_not_mult_128"),        # N % 128 = 64
        c(16, 2176, 2048, 128, "n_mult_128_not_256"),    # thread_n 128 at M <= 16: runs
        c(32, 2176, 2048, 128, "n_not_mult_256_m_gt_16"),  # thread_n 256 at M > 16: rc 1
        c(32, 2304, 2048, 128, "n_mult_256_m_gt_16"),
        c(16, 2048, 2048, 2048, "per_row_minus_1"),      # group_size == K -> gs -1
        c(64, 2048, 8192, 8192, "per_row_minus_1"),      # one group of 8192
        c(16, 2048, 2048, 64, "group_64_no_kernel"),     # Marlin has no g64 kernel: rc 2
        c(16, 50257, 2048, 128, "head_projection"),
        c(1, 50257, 2048, 2048, "head_projection"),
        c(65, 2048, 2048, 128, "m_above_64"),            # Marlin splits M into 64-row problems
        c(100, 2048, 2048, 128, "m_above_64_padded"),
        c(1024, 2048, 2048, 128, "m_1024"),
    ])


SWEEP_NK = ((8192, 8192), (2048, 8192), (6144, 2048))


@MATRICES.register("sweep", "M = 1, 2, 4 .. 4096 over a few (N, K), for roofline plots")
def sweep() -> list[GemmCase]:
    cases = []
    for n, k in SWEEP_NK:
        for p in range(13):
            cases.append(GemmCase(M=2 ** p, N=n, K=k, group_size=128, seed=3, tags=("sweep",)))
    for p in range(13):
        cases.append(GemmCase(M=2 ** p, N=8192, K=8192, group_size=8192, seed=3, tags=("sweep",)))
    return cases


@MATRICES.register("smoke", "a few tiny cases that run in seconds on a CPU")
def smoke() -> list[GemmCase]:
    return [
        GemmCase(M=1, N=256, K=256, group_size=128, seed=4, tags=("smoke",)),
        GemmCase(M=16, N=256, K=512, group_size=512, seed=4, tags=("smoke",)),
        GemmCase(M=17, N=512, K=256, group_size=128, seed=4, tags=("smoke",)),
        GemmCase(M=32, N=256, K=384, group_size=128, seed=4, tags=("smoke",)),
        GemmCase(M=4, N=256, K=256, group_size=128, seed=4, tags=("smoke",), kind="swiglu_pair"),
    ]
