"""Example INT4 GEMM paths for the harness (docs/plugins.md): ``torch_dequant`` (a plain
torch dequantize-then-matmul, CPU and GPU) and ``triton_int4`` (a Triton kernel that keeps
the weight as 4-bit codes, dequantizes with the asymmetric zero point in registers and
multiplies on the fp16 tensor cores)."""
