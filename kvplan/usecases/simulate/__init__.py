"""`kvplan simulate`: workloads, arrivals, the step-time model, metrics and capacity answers.

Pure Python on top of ``kvplan.semantics.engine``; nothing here imports torch or transformers."""
