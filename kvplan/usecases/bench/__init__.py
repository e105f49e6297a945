"""`kvplan bench`: `vllm bench serve` predicted (serve) and a prediction held against a measurement (compare)."""
