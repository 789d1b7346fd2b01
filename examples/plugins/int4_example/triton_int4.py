"""``triton_int4``: an INT4 x FP16 GEMM written in Triton, with TinyLoop's asymmetric zero
points, for a kernel author to start from.

Weight layout (built by ``pack``, at load time): the 4-bit codes two per byte along K,
``packed[k // 2, n] = q[2j, n] | q[2j + 1, n] << 4`` (uint8 [K / 2, N]), and the fp16
scale and zero per (group, column) as the harness gives them. The kernel tiles C in
BLOCK_M x BLOCK_N, walks K in BLOCK_K steps (BLOCK_K divides the group size, so one scale
and zero row per step), unpacks the codes in registers, dequantizes W = q * scale + zero in
float32, rounds it once to fp16 and accumulates ``tl.dot`` (fp16 tensor cores, fp32
accumulator). No split-K: the same inputs give the same bits.

What a real kernel would do next (measured by the harness, not here): load each packed
byte once (this loads it for both of its codes), tune the block shapes per M (the
heuristic in ``blocks`` is a guess), split K for decode shapes with few output tiles.
"""

from __future__ import annotations

import torch

from harness.kernels.base import GemmPath, Prepared, UnsupportedCase

try:
    import triton
    import triton.language as tl
except ImportError:                      # the CPU CI machine: the path says it is unavailable
    triton = None

#: K steps of the kernel must divide the group size (one scale row per step).
K_STEP = 64


def pack(q: torch.Tensor) -> torch.Tensor:
    """uint8 codes [K, N] (0..15) -> two per byte along K, uint8 [K / 2, N]."""
    if q.shape[0] % 2:
        raise ValueError(f"pack: K = {q.shape[0]} is odd")
    return (q[0::2] | (q[1::2] << 4)).contiguous()


def blocks(M: int, group_size: int) -> dict:
    """Block shapes and launch options by M (decode, mid, prefill); not tuned."""
    bk = 128 if group_size % 128 == 0 else K_STEP
    if M <= 16:
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=bk, num_warps=4, num_stages=4)
    if M <= 64:
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=K_STEP, num_warps=4, num_stages=4)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=K_STEP, num_warps=8, num_stages=3)


if triton is not None:
    @triton.jit
    def _int4_asym_kernel(a_ptr, b_ptr, s_ptr, z_ptr, c_ptr, M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_sg, stride_sn,
                          stride_cm, stride_cn, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        m_ok = offs_m < M
        n_ok = offs_n < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + offs_k
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
                        mask=m_ok[:, None], other=0.0)
            byte = tl.load(b_ptr + (k // 2)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                           mask=n_ok[None, :], other=0)
            q = (byte.to(tl.int32) >> ((k % 2) * 4)[:, None]) & 0xF
            g = k0 // GROUP
            s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn, mask=n_ok, other=0.0)
            z = tl.load(z_ptr + g * stride_sg + offs_n * stride_sn, mask=n_ok, other=0.0)
            w = q.to(tl.float32) * s.to(tl.float32)[None, :] + z.to(tl.float32)[None, :]
            acc += tl.dot(a, w.to(tl.float16))
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                 acc.to(tl.float16), mask=m_ok[:, None] & n_ok[None, :])


def int4_matmul(A: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor,
                group_size: int, out: torch.Tensor) -> torch.Tensor:
    """out[M, N] = A[M, K] @ (q * scale + zero) with the codes ``packed`` (see ``pack``)."""
    M, K = A.shape
    N = out.shape[1]
    cfg = blocks(M, group_size)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    _int4_asym_kernel[grid](A, packed, scale, zero, out, M, N, K,
                            A.stride(0), A.stride(1), packed.stride(0), packed.stride(1),
                            scale.stride(0), scale.stride(1), out.stride(0), out.stride(1),
                            GROUP=group_size, **cfg)
    return out


class TritonInt4Path(GemmPath):
    """The Triton kernel above: int4 codes in global memory, dequantized in registers."""

    name = "triton_int4"
    role = "path"
    description = "Triton INT4 x FP16 GEMM, asymmetric zero point dequantized in registers"
    weight_formula = "int4 K*N/2 + fp16 scale G*N*2 + fp16 zero G*N*2"
    device_types = ("cuda",)
    min_capability = (8, 0)            # fp16 tl.dot on tensor cores: Ampere and newer

    def unavailable_reason(self, device: torch.device) -> str | None:
        if triton is None:
            return "triton is not installed (pip install triton; GPU machines usually have it)"
        return self.arch_reason(device)

    def unsupported_reason(self, case) -> str | None:
        if case.K % K_STEP or case.group_size % K_STEP:
            return (f"triton_int4 steps K by {K_STEP}: K = {case.K} and the group size "
                    f"{case.group_size} must be multiples of it")
        return None

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return K * N // 2 + 4 * groups * N

    def prepare(self, weight, device: torch.device) -> Prepared:
        if weight.K % K_STEP or weight.group_size % K_STEP:
            raise UnsupportedCase(f"K = {weight.K}, group size {weight.group_size}: not "
                                  f"multiples of {K_STEP}")
        w = weight.to(device)
        return Prepared(self.name, w, device, state={
            "packed": pack(w.q), "scale": w.scale.contiguous(), "zero": w.zero.contiguous()})

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        s = prepared.state
        return int4_matmul(A, s["packed"], s["scale"], s["zero"], prepared.weight.group_size,
                           out)
