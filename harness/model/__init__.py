"""Model: the looped transformer whose perplexity drift ``harness ppl`` measures per GEMM
path (``transformer``), its trained fixture (``fixture``, ``train``, ``corpus``), the
quantized linear layer that runs a path or TinyLoop's dispatcher (``quant_linear``),
scoring and result rows (``ppl``) and local Hugging Face models (``hf``, optional
``transformers``). The command line is ``harness.commands.ppl``.
"""
