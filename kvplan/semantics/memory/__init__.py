"""vLLM's memory accounting: the budget formula and its log lines."""
