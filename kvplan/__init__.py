"""kvplan: exact KV-cache sizing, profiling and simulation with the semantics of each vLLM release it
reproduces (`kvplan.semantics.releases`)."""

__version__ = "0.1.0"
