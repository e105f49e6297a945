"""kvplan: exact KV-cache sizing, profiling and simulation with vLLM 0.17.1's semantics."""

__version__ = "0.1.0"
