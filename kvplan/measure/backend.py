"""What every measurement backend (cuda, cpu, fake) reports, and the interface they share.

A backend owns one device: it takes the start-up snapshot, loads the model, runs the profile
run inside its own measurement, and allocates the KV cache. The orchestration in
`kvplan.profile` turns its numbers into vLLM's budget."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kvplan.errors import KvplanError
from kvplan.semantics.kv.specs import KVCacheConfig
from kvplan.semantics.memory.profile_batch import ProfileBatch
from kvplan.semantics.memory.sampler import SamplerSpec
from kvplan.semantics.releases import ProfileSampler

if TYPE_CHECKING:
    from kvplan.measure.kv_tensors import KvCacheAllocation
    from kvplan.measure.shard import RankShard

BackendName = Literal["cuda", "cpu", "fake"]
LoadFormat = Literal["dummy", "auto"]
BACKENDS = ("auto", "cuda", "cpu", "fake")
LOAD_FORMATS = ("dummy", "auto")
LayerKind = Literal["attention", "mla", "mamba"]


@dataclass(frozen=True)
class DeviceSnapshot:
    """`MemorySnapshot` at start-up: the device total, what is free, and torch's reserve."""

    total_bytes: int
    free_bytes: int
    torch_reserved_bytes: int = 0

    @property
    def non_torch_bytes(self) -> int:
        """`(total - free) - memory_reserved()`: the CUDA context, other processes, NCCL..."""
        return (self.total_bytes - self.free_bytes) - self.torch_reserved_bytes


@dataclass(frozen=True)
class ModelSource:
    """What to build: a config.json dict, where it came from, how to get weights."""

    model_id: str
    config: dict[str, Any]
    dtype: str                         # resolved model dtype, a torch name ("bfloat16")
    load_format: LoadFormat = "dummy"
    directory: Path | None = None      # holds the safetensors for --load-format auto
    trust_remote_code: bool = False
    shard: RankShard | None = None     # one rank's shard under tensor / pipeline parallelism (fake backend)

    def checkpoint(self) -> Path:
        """The directory `--load-format auto` loads the weights from (exit 2 when there is none)."""
        if self.directory is None:
            raise KvplanError(
                f"--load-format auto needs the weights of {self.model_id} in a local directory; "
                "pass --model DIR, or use --load-format dummy"
            )
        return self.directory


@dataclass(frozen=True)
class WeightsMeasurement:
    weights_bytes: int                 # what loading allocated (vLLM's "Model loading took")
    parameter_bytes: int               # the parameters alone, tied ones once
    how: str


@dataclass(frozen=True)
class ActivationMeasurement:
    activation_peak_bytes: int         # torch peak increase during the profile run
    non_torch_increase_bytes: int | None   # None where the backend cannot measure it
    how: str
    sampler: SamplerSpec               # the dummy sampler run's vocabulary and SM count
    cross_checks: dict[str, int] = field(default_factory=dict)
    retained_bytes: int = 0            # what the run leaves allocated (vLLM's cached sampler buffers)
    consumed_bytes: int | None = None  # the drop in free memory since start-up (cuda only)


@dataclass(frozen=True)
class LayerLayout:
    """How one layer sees its tensor: logical shape, strides (elements) and dtype."""

    layer_name: str
    tensor_index: int
    kind: LayerKind
    dtype: str
    shapes: tuple[tuple[int, ...], ...]     # one per state for Mamba, else one
    strides: tuple[tuple[int, ...], ...]
    block_size: int
    kernel_block_size: int


@dataclass(frozen=True)
class SlotCheck:
    """The slot-mapping round trip: K/V written through `slot = block * block_size + offset`
    into random blocks, read back from each layer's view, then found in the raw bytes at the
    offsets the attention backend's documented layout gives (not through the view's strides)."""

    passed: bool
    layers_checked: int
    tokens: int
    block_table: tuple[int, ...]
    first_slots: tuple[int, ...]            # the slot mapping's first entries, for the report
    view_round_trip: bool
    raw_bytes_match: bool                   # every written row where the layout puts it
    untouched_blocks_zero: bool             # nothing else in those blocks, nor in a few untouched ones
    shared_storage: bool
    detail: str = ""


@dataclass(frozen=True)
class AllocationReport:
    """The KV tensors as allocated: layout per layer, bytes, and the slot-mapping check."""

    device: str
    attention_backend: str
    pool_bytes: int
    num_tensors: int
    layouts: tuple[LayerLayout, ...]
    real: bool                         # False: the full pool exists only on the meta device
    committed_bytes: int | None        # growth measured while allocating (RSS, allocator)
    check: SlotCheck
    check_pool_blocks: int             # blocks in the pool the round trip ran on
    how: str
    # the allocated tensors themselves, for `kvplan profile --workload` (None when not real)
    pool: KvCacheAllocation | None = field(default=None, repr=False, compare=False)


class MemoryBackend(Protocol):
    name: BackendName
    predicted: bool
    device_label: str

    def snapshot(self) -> DeviceSnapshot: ...

    def multiprocessors(self) -> int | None: ...

    def load_model(self, source: ModelSource) -> WeightsMeasurement: ...

    def profile(
        self, batch: ProfileBatch, multiprocessors: int, sampler: ProfileSampler = "v1_one_pass"
    ) -> ActivationMeasurement: ...

    def forward_peak(self, num_tokens: int) -> int:
        """The activation peak of one forward of `num_tokens` tokens, without the sampler (what a
        CUDA graph of that decode batch holds)."""
        ...

    def graph_samples(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        """The memory each capture of a CUDA graph of the forward at `sizes` tokens takes in a
        throw-away pool, measured (cuda only)."""
        ...

    def release_model(self) -> None: ...

    def allocate(self, config: KVCacheConfig, attention_backend: str) -> AllocationReport: ...


class PlannedGpu:
    """The GPU a host backend (cpu, fake) plans for: a catalog total, idle at start-up."""

    def __init__(self, total_bytes: int, device_label: str, multiprocessors: int | None = None) -> None:
        self.total_bytes = total_bytes
        self.device_label = device_label
        self._multiprocessors = multiprocessors

    def snapshot(self) -> DeviceSnapshot:
        # everything is free at start-up: vLLM's budget is ceil(total x utilization) of this GPU
        return DeviceSnapshot(self.total_bytes, self.total_bytes)

    def multiprocessors(self) -> int | None:
        return self._multiprocessors
