"""Measuring what is not KV cache, the way vLLM does, on three backends: cuda (the GPU's allocator
counters), cpu (real tensors in RAM) and fake (a prediction with no GPU and no memory); how the terms
add up per release is `kvplan.semantics.memory.budget`, how the backends were designed
docs/prediction.md.

    backend.py      what every backend reports, and their shared interface
    fake.py / cpu.py / cuda.py   the backends
    dummy_run.py    vLLM's profile run on a transformers model; dummy_sampler.py its dummy sampler
    tracker.py      live tensor bytes; attention.py the flash-like attention; hf.py model building
    hf_config.py / decoder.py / meta_build.py / shard.py   model configs, the catalog's decoders,
                    weight bytes without memory, one rank's shard under TP/PP
    kv_tensors.py   the KV-cache tensors and the slot-mapping round trip; pool_writer.py the model
                    runner of `kvplan profile --workload`
    lean_torch.py   torch's meta kernels without its compiler
    nvml.py         optional NVML telemetry

Importing this package imports nothing heavy; its modules import torch."""
