"""vLLM's start-up log lines as `kvplan explain` reads them back: one pattern per line kvplan
reproduces (`kvplan.semantics.kv.sizing.LOG_FORMATS`, `kvplan.semantics.memory.budget`) or reads for
a setting, each with the wordings that print it, and the record header every line starts with.

The wordings are the values of `Release.log_format` (`LogWording`): two capacity lines ("GPU KV
cache size: N tokens" then "Maximum concurrency for L tokens per request: Cx", vLLM 0.17.1 up to the
0.2x releases), one merged line (0.3x), and the merged line logged after warmup with the "Memory after
warmup" and "Extended KV cache" lines (0.34.0, docs/vllm/changes-0.34.md §1.4 and §1.7). A line
printed by every wording has `wordings=None`. Figures are vLLM's `format_gib` (GiB to 2 decimals,
trailing zeros dropped), so a byte count read back is known to +-0.005 GiB (`GIB_RESOLUTION`).

Pure data and regular expressions: no file, no torch."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

LogWording = Literal["separate_capacity_lines", "merged_capacity_line", "merged_capacity_line_after_warmup"]
WORDINGS: tuple[LogWording, ...] = (
    "separate_capacity_lines", "merged_capacity_line", "merged_capacity_line_after_warmup",
)
GIB = 1 << 30
# half of format_gib's last digit: a logged GiB figure stands for any byte count within this of it
GIB_RESOLUTION = GIB // 200

# vLLM's logger: "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s" with the date as
# "%m-%d %H:%M:%S", behind the multiprocessing prefix "(EngineCore_DP0 pid=123) " of the process
# that logged it; older releases print the file without the opening bracket
RECORD = re.compile(
    r"(?:\((?P<process>[A-Za-z][\w.-]*) pid=(?P<pid>\d+)\)\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? "
    r"\[?(?P<source>[\w./-]+\.py:\d+)\] ?"
)
# a line without a record header that a process still prefixed (tracebacks, print, progress bars)
PROCESS_PREFIX = re.compile(r"^\((?P<process>[A-Za-z][\w.-]*) pid=(?P<pid>\d+)\)\s?")
# what terminals and log collectors put in front: colours, docker and kubectl timestamps, table borders
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
COLLECTOR_PREFIX = re.compile(r"^(?:[│|]\s*)?(?:\d{4}-\d\d-\d\d[T ][\d:.,]+Z?\s+)?")

_GIB = r"-?\d+(?:\.\d+)?"          # format_gib: "58.11", "15.0", "-1.44"
_INT = r"\d[\d,]*"                 # "{:,}" thousands separators


@dataclass(frozen=True)
class LinePattern:
    """One line vLLM prints: its pattern (searched in a record's message) and the wordings that
    print it in this form (None: every wording kvplan reads)."""

    name: str
    pattern: re.Pattern[str]
    wordings: tuple[LogWording, ...] | None = None


def _line(name: str, pattern: str, *wordings: LogWording) -> LinePattern:
    return LinePattern(name, re.compile(pattern), wordings or None)


# The lines kvplan reads, by the name of what they tell. The suggestion's two usage sentences are
# budget.USAGE_LINE's; the capacity lines are sizing.LOG_FORMATS' capacity_lines.
LINES: tuple[LinePattern, ...] = (
    # the release and the model
    _line("banner_version", r"█\s+version (?P<version>\d+\.\d+\.\d+[\w.+-]*)\s*$"),
    _line("banner_model", r"█\s+model\s+(?P<model>\S+)\s*$"),
    _line("server_version", r"vLLM API server version (?P<version>\d+\.\d+\.\d+[\w.+-]*)"),
    _line("engine_config", r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config: (?P<config>.*)$"),
    _line("non_default_args", r"non-default args: (?P<args>\{.*\})\s*$"),
    # settings vLLM settled
    _line("max_model_len", r"Using max model len (?P<tokens>\d+)"),
    _line("chunked_prefill", r"Chunked prefill is enabled with max_num_batched_tokens=(?P<tokens>\d+)"),
    _line("default_batched_tokens", r"Defaulting max_num_batched_tokens to (?P<tokens>\d+)"),
    _line("default_num_seqs", r"Defaulting max_num_seqs to (?P<seqs>\d+)"),
    _line("async_scheduling", r"Asynchronous scheduling is (?P<state>enabled|disabled)"),
    _line("attention_block_size", r"Setting attention block size to (?P<tokens>\d+) tokens"),
    _line("forced_block_size", r"Forcing kv cache block size to (?P<tokens>\d+)"),
    # the device at start-up
    _line("init_snapshot", r"worker init memory snapshot: .*?free_memory=(?P<free>" + _GIB + r")GiB, "
          r"total_memory=(?P<total>" + _GIB + r")GiB"),
    _line("requested_memory", r"worker requested memory: (?P<requested>" + _GIB + r") ?GiB"),
    # the profile run's terms
    _line("model_loading", r"Model loading took (?P<weights>" + _GIB + r") ?GiB(?: memory)? and "
          r"(?P<seconds>[\d.]+) seconds"),
    _line("profile_result_terms", r"Memory profiling takes [\d.]+ seconds\. Total non KV cache memory: "
          r"(?P<non_kv>" + _GIB + r")GiB; torch peak memory increase: (?P<peak>" + _GIB + r")GiB; "
          r"non-torch forward increase memory: (?P<non_torch>" + _GIB + r")GiB; weights memory: "
          r"(?P<weights>" + _GIB + r")GiB", "separate_capacity_lines"),
    _line("profile_result_consumed", r"Memory profiling takes [\d.]+ seconds\. Total non KV cache memory: "
          r"(?P<non_kv>" + _GIB + r")GiB; torch peak memory increase: (?P<peak>" + _GIB + r")GiB; "
          r"total consumed \(from mem_get_info\): (?P<consumed>" + _GIB + r")GiB; weights memory: "
          r"(?P<weights>" + _GIB + r")GiB", "merged_capacity_line", "merged_capacity_line_after_warmup"),
    _line("graph_estimate", r"Estimated CUDA graph memory: (?P<estimate>" + _GIB + r") GiB total"),
    _line("graph_estimate_applied", r"CUDA graph memory profiling is enabled .*?The current "
          r"--gpu-memory-utilization=(?P<utilization>[\d.]+) is equivalent to --gpu-memory-utilization="
          r"(?P<equivalent>[\d.]+) without"),
    _line("graph_estimate_pending", r"CUDA graph memory profiling will be enabled by default .*?increase "
          r"--gpu-memory-utilization from (?P<utilization>[\d.]+) to (?P<suggested>[\d.]+)"),
    _line("available_kv", r"Available KV cache memory: (?P<available>" + _GIB + r") GiB"),
    _line("kv_cache_memory_given", r"Initial free memory (?P<free>" + _GIB + r") GiB, reserved "
          r"(?P<given>" + _GIB + r") GiB memory for KV Cache as specified by kv_cache_memory_bytes"),
    # the pool: sizing.LOG_FORMATS' capacity lines
    _line("capacity_tokens", r"GPU KV cache size: (?P<tokens>" + _INT + r") tokens\s*$", "separate_capacity_lines"),
    _line("capacity_concurrency", r"^Maximum concurrency for (?P<length>" + _INT + r") tokens per request: "
          r"(?P<concurrency>[\d.]+)x", "separate_capacity_lines"),
    _line("capacity_merged", r"(?P<device>\w+) KV cache size: (?P<tokens>" + _INT + r") tokens, Maximum "
          r"concurrency for (?P<length>" + _INT + r") tokens per request: (?P<concurrency>[\d.]+)x",
          "merged_capacity_line", "merged_capacity_line_after_warmup"),
    # after the KV cache exists: graphs, the suggestion, 0.34.0's measured size
    _line("graph_capture", r"Graph capturing finished in \d+ secs?, took (?P<pool>" + _GIB + r") GiB"),
    _line("graph_pool", r"CUDA graph pool memory: (?P<pool>" + _GIB + r") GiB \(actual\), (?P<estimate>"
          + _GIB + r") GiB \(estimated\)"),
    _line("suggestion_start", r"Free memory on device \((?P<free>" + _GIB + r")/(?P<total>" + _GIB + r") GiB\) "
          r"on startup\. Desired GPU memory utilization is \((?P<utilization>[\d.]+), (?P<requested>" + _GIB
          + r") GiB\)\."),
    _line("suggestion_terms", r"Actual usage is (?P<weights>" + _GIB + r") GiB for weight, (?P<peak>" + _GIB
          + r") GiB for peak activation, (?P<non_torch>" + _GIB + r") GiB for non-torch memory, and "
          r"(?P<graphs>" + _GIB + r") GiB for CUDAGraph memory\.", "separate_capacity_lines"),
    _line("suggestion_consumed", r"Actual usage is (?P<consumed>" + _GIB + r") GiB for consumed memory "
          r"\(weights \+ non-torch\), (?P<peak>" + _GIB + r") GiB for peak activation, and (?P<graphs>" + _GIB
          + r") GiB for CUDAGraph memory\.", "merged_capacity_line", "merged_capacity_line_after_warmup"),
    _line("suggestion_bytes", r"--kv-cache-memory=(?P<to_requested>-?\d+)` \([^)]*\) to fit into requested "
          r"memory, or `--kv-cache-memory=(?P<to_gpu>-?\d+)`"),
    _line("memory_after_warmup", r"Memory after warmup: (?P<free>" + _GIB + r") GiB free, (?P<committed>" + _GIB
          + r") GiB committed to the KV cache, (?P<kept>" + _GIB + r") GiB kept for transient activations "
          r"\((?P<peak>" + _GIB + r") GiB allocated at peak, (?P<growth>" + _GIB + r") GiB of torch reservation "
          r"growth\); (?P<blocks>\d+) KV cache blocks \((?P<kv>" + _GIB + r") GiB\) fit within the requested "
          r"(?P<requested>" + _GIB + r") GiB\.", "merged_capacity_line_after_warmup"),
    _line("extended_kv_cache", r"Extended KV cache to (?P<blocks>\d+) blocks \((?P<kv>" + _GIB + r") GiB\)\.",
          "merged_capacity_line_after_warmup"),
    _line("engine_ready", r"init engine \(profile, create kv cache, warmup model\) took"),
)

# The errors a start-up ends in, searched in every line (they also come as bare traceback lines)
ERRORS: tuple[LinePattern, ...] = (
    _line("startup_refusal", r"Free memory on device (?P<device>\S+) \((?P<free>" + _GIB + r")/(?P<total>" + _GIB
          + r") GiB\) on startup is less than desired GPU memory utilization \((?P<utilization>[\d.]+), "
          r"(?P<requested>" + _GIB + r") GiB\)"),
    _line("no_cache_memory", r"No available memory for the cache blocks"),
    _line("max_model_len_too_large", r"To serve at least one request with the models?'s max seq len "
          r"\((?P<length>\d+)\), \((?P<needed>" + _GIB + r") GiB KV cache is needed, which is larger than the "
          r"available KV cache memory \((?P<available>" + _GIB + r") GiB\)\.(?: Based on the available memory, "
          r"the estimated maximum model length is (?P<estimated>\d+)\.)?"),
    _line("max_model_len_over_derived", r"User-specified max_model_len \((?P<length>\d+)\) is greater than the "
          r"derived max_model_len \((?P<key>\w+)=(?P<derived>[\d.]+)"),
    _line("cannot_auto_fit", r"Cannot auto-fit max_model_len"),
    _line("out_of_memory", r"CUDA out of memory\. Tried to allocate (?P<tried>[\d.]+) (?P<tried_unit>[KMG]iB)\. "
          r"GPU \d+ has a total capacity of (?P<total>[\d.]+) GiB of which (?P<free>[\d.]+) (?P<free_unit>[KMG]iB) "
          r"is free"),
    _line("out_of_memory_phase", r"CUDA out of memory occurred when (?P<phase>[^.]+)\."),
)

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def gib_bytes(text: str) -> int:
    """A format_gib figure as bytes (the nearest byte count it stands for)."""
    return round(float(text) * GIB)


def count(text: str) -> int:
    """A "{:,}" count as an int."""
    return int(text.replace(",", ""))
