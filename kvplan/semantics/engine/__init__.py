"""vLLM 0.17.1's block manager and scheduler in pure Python (no torch): `kvplan replay` and
`kvplan simulate` run on it."""
