"""The names of the step-time methods (`--step-time`), apart from the simulator so that the
options every command shares name them without importing it (plan's light path)."""

from __future__ import annotations

# auto: measured kernels where they price the setup as well as the roofline (docs/accuracy.md), else
# the roofline; kernels: the perf extra's measured kernel tables; roofline: bandwidth and FLOP/s
STEP_TIME_METHODS = ("auto", "kernels", "roofline")
