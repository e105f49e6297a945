"""Layer 1, vLLM's semantics in pure Python (never torch or transformers): model shapes, the
configuration rules, KV specs and sizing, memory accounting, and the engine (block pool,
managers, scheduler)."""
