"""Measuring what is not KV cache, the way vLLM 0.17.1 does, on three backends: cuda (the GPU's
allocator counters), cpu (real tensors in RAM) and fake (a prediction with no GPU and no memory).

    budget.py       vLLM's accounting from the start-up snapshot to the KV budget, and its log lines
    backend.py      what every backend reports, and their shared interface
    fake.py / cpu.py / cuda.py   the backends
    profile_run.py  vLLM's profile run on a transformers model; sampler.py its dummy sampler
    tracker.py      live tensor bytes; attention.py the flash-like attention; hf.py model building
    nvml.py         optional NVML telemetry

Importing this package imports nothing heavy; its modules import torch."""
