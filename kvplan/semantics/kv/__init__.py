"""vLLM's KV-cache spec family, grouping, sizing, and per-worker layer specs."""
