"""`kvplan sweep`: every cell of a grid (models x GPUs x parallelism x dtypes x knobs x workloads x
vLLM releases) through plan, profile and simulate, one row per cell, on one machine or a Ray cluster."""
