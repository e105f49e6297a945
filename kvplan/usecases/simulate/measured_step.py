"""A step priced from measured kernel times (``--step-time kernels``; the `perf` extra).

A scheduled step runs the model once over all its tokens: every linear layer, norm and activation
(and the all-reduce under tensor parallelism) over the step's token count, the lm_head over the
rows it samples, and attention twice over: the decodes' one-token queries against their contexts
(the generation kernel) and the prefill chunks' queries against their prefixes and themselves
(the context kernel). ``KernelStepTime`` adds those operators' times, as the tables of
``kvplan.measure.kernel_tables`` give them for the step's GPU, model and formats, to the engine
core's CPU work per step and per running request (the roofline's ``step_ms`` and ``request_ms``,
docs/accuracy.md), which no kernel table holds.

A step's price depends on a few numbers (its tokens, its requests, its decodes and their context,
its prefill chunks and theirs), so each part is cached by its own: the token operators by token
count (exactly up to 64 tokens, above it on a grid of at most 1/16 step, interpolated), the lm_head
by rows, decode attention by (decodes, context on that grid, interpolated), prefill attention by
(chunks, tokens per chunk and prefix on that grid).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.usecases.simulate.timing import DEFAULT_FACTORS, StepFactors, StepLoad

if TYPE_CHECKING:
    from kvplan.measure.kernel_tables import KernelTables


EXACT_TOKENS = 64


def grid_step(value: int) -> int:
    """The spacing of the price grid near ``value``: 16 tokens, or 1/16 to 1/32 of the value above 512."""
    return max(16, 1 << max(0, value.bit_length() - 5))


def on_grid(value: int) -> int:
    step = grid_step(value)
    return max(step, (value + step // 2) // step * step)


class KernelStepTime:
    """The step time from measured kernels plus the engine core's CPU work (a ``StepTimeModel``)."""

    def __init__(self, tables: KernelTables, *, weight_format: str, cuda_graphs: bool = True,
                 num_layers: int = 0, factors: StepFactors = DEFAULT_FACTORS,
                 overhead_ms: float | None = None, overlapped: bool = True) -> None:
        self.tables = tables
        self.weight_format = weight_format
        self.cuda_graphs = cuda_graphs
        # kernel tables time kernels back to back; without CUDA graphs each is launched from the CPU
        launch_ms = 0.0 if cuda_graphs else factors.eager_layer_ms * num_layers
        self.fixed_s = ((factors.step_ms if overhead_ms is None else overhead_ms) + launch_ms) / 1e3
        self.request_s = factors.request_ms / 1e3
        # async scheduling (two batches in flight) prepares the next batch's requests while the GPU
        # runs this one: their CPU work hides under the kernels, and only the longer of the two counts
        self.overlapped = overlapped
        self._tokens: dict[int, float] = {}
        self._token_grid: dict[int, float] = {}
        self._logits: dict[int, float] = {}
        self._decode: dict[tuple[int, int], float] = {}
        self._prefill: dict[tuple[int, int, int], float] = {}

    @property
    def method(self) -> str:
        return (f"measured kernels ({self.tables.source}; {self.weight_format} weights, CUDA graphs "
                f"{'on' if self.cuda_graphs else 'off'}; engine overheads: docs/accuracy.md)")

    def seconds(self, load: StepLoad) -> float:
        tokens = load.num_tokens
        if tokens == 0:
            return self.fixed_s
        requests = load.num_requests
        decodes = load.decodes or 0
        ms = self._token_ms(tokens) + self._logits_ms(requests)
        if decodes:
            ms += self._decode_ms(decodes, load.decode_context / decodes)
        chunks = requests - decodes
        if chunks > 0 and tokens > decodes:
            new = (tokens - decodes) / chunks
            prefix = max(0.0, (load.context_tokens - load.decode_context) / chunks - new)
            ms += self._prefill_ms(chunks, on_grid(round(new)), 0 if prefix < 8 else on_grid(round(prefix)))
        cpu = self.request_s * requests
        gpu = ms / 1e3
        return self.fixed_s + (max(cpu, gpu) if self.overlapped else cpu + gpu)

    def _token_ms(self, tokens: int) -> float:
        value = self._tokens.get(tokens)
        if value is None:
            # up to 64 tokens exactly (decode batches), above it linear between grid points
            if tokens <= EXACT_TOKENS:
                value = self.tables.token_ops_ms(tokens)
            else:
                step = grid_step(tokens)
                low = tokens // step * step
                fraction = (tokens - low) / step
                value = ((1 - fraction) * self._token_at(low) + fraction * self._token_at(low + step)
                         if fraction else self._token_at(low))
            self._tokens[tokens] = value
        return value

    def _token_at(self, tokens: int) -> float:
        value = self._token_grid.get(tokens)
        if value is None:
            value = self._token_grid[tokens] = self.tables.token_ops_ms(tokens)
        return value

    def _logits_ms(self, rows: int) -> float:
        value = self._logits.get(rows)
        if value is None:
            value = self._logits[rows] = self.tables.logits_ms(rows)
        return value

    def _decode_ms(self, batch: int, context: float) -> float:
        # linear between the two grid points around the mean context
        whole = int(context)
        step = max(16, 1 << max(0, whole.bit_length() - 5))
        low = max(step, whole // step * step)
        fraction = min(1.0, max(0.0, (context - low) / step))
        if not fraction:
            return self._decode_at(batch, low)
        return (1 - fraction) * self._decode_at(batch, low) + fraction * self._decode_at(batch, low + step)

    def _decode_at(self, batch: int, context: int) -> float:
        key = (batch, context)
        value = self._decode.get(key)
        if value is None:
            value = self._decode[key] = self.tables.decode_attention_ms(batch, context)
        return value

    def _prefill_ms(self, chunks: int, tokens: int, prefix: int) -> float:
        key = (chunks, tokens, prefix)
        value = self._prefill.get(key)
        if value is None:
            value = self._prefill[key] = self.tables.prefill_attention_ms(chunks, tokens, prefix)
        return value
