"""The profile record for people: the memory breakdown, the KV layout, the allocation check,
vLLM's log lines with the same numbers, and the knobs that reach a target. It reads the JSON
record only, so a saved profile renders the same way."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvplan.units import format_gib, human_bytes


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{format_gib(value)} GiB"


def _exact(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _title(record: dict[str, Any]) -> str:
    kind = "PREDICTED" if record["predicted"] else "MEASURED"
    how = {"fake": "fake backend, no GPU used", "cpu": "cpu backend: real tensors in RAM", "cuda": "on the GPU"}
    return f"[bold]{record['model']}[/] on {record['device']}: {kind} ({how.get(record['backend'], record['backend'])})"


def _breakdown(record: dict[str, Any]) -> Table:
    table = Table(title="Memory (per GPU, vLLM 0.17.1 accounting)", title_justify="left")
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("how")
    run = record["profile_run"]
    measurement = record["measurement"]
    plan = record["plan"] or {}
    rows = [
        ("total", record["total_bytes"], ""),
        (f"requested (x {record['gpu_memory_utilization']})", record["requested_bytes"],
         "ceil(total x gpu_memory_utilization)"),
        ("weights", record["weights_bytes"], measurement["weights"] or ""),
        ("activation peak", record["activation_peak_bytes"],
         f"profile run: {run['num_tokens']:,} tokens over {run['num_reqs']:,} requests + dummy sampler"),
        ("non-torch", record["non_torch_bytes"], record["non_torch_source"] or ""),
        ("= non-KV", record["non_kv_bytes"], "weights + activation peak + non-torch"),
        ("KV cache available", record["available_kv_bytes"],
         "--kv-cache-memory as given" if record["kv_cache_memory_given"] else "requested - non-KV"),
        ("KV cache allocated", record["kv_cache_bytes"],
         "" if record["num_blocks"] is None else
         f"{record['num_blocks']:,} blocks x {record['page_size_bytes']:,} B x {len(plan.get('kv_cache_tensors', []))} "
         "tensors"),
    ]
    outside = record["outside_requested"]
    rows.append(("outside requested", outside["headroom_bytes"], "total - requested: CUDA context + CUDA graphs"))
    rows.append(("  CUDA context", outside["cuda_context_bytes"], outside["cuda_context_source"]))
    rows.append(("  CUDA-graph pool", outside["cuda_graph_bytes"], outside["cuda_graph_source"]))
    for term, value, how in rows:
        table.add_row(term, _gib(value), _exact(value), how)
    return table


def _layout(record: dict[str, Any]) -> Table | None:
    plan = record["plan"]
    if not plan or not plan["kv_cache_groups"]:
        return None
    table = Table(title="KV cache groups", title_justify="left")
    for column in ("group", "spec", "layers", "block", "page bytes"):
        table.add_column(column)
    for index, group in enumerate(plan["kv_cache_groups"]):
        spec = group["spec"]
        detail = spec["type"]
        if "num_kv_heads" in spec:
            detail += f" {spec['num_kv_heads']}x{spec['head_size']} {spec['dtype']}"
        table.add_row(str(index), detail, str(group["num_layers"]), str(spec["block_size"]),
                      f"{spec['page_size_bytes']:,}")
    return table


def _tensors(record: dict[str, Any]) -> Table | None:
    allocation = record["allocation"]
    if allocation is None:
        return None
    where = "allocated on the GPU" if allocation["device"].startswith("cuda") else (
        "allocated in RAM" if allocation["real"] else "built on the meta device (no memory)")
    table = Table(title=f"KV tensors, {allocation['attention_backend']} layout ({where})", title_justify="left")
    for column in ("layers", "tensor", "dtype", "shape", "strides (elements)"):
        table.add_column(column)
    layers = allocation["layers"]
    shown = layers if len(layers) <= 4 else [*layers[:2], None, layers[-1]]
    for layer in shown:
        if layer is None:
            table.add_row(f"... {len(layers) - 3} more", "", "", "", "")
            continue
        table.add_row(layer["layer"], str(layer["tensor"]), layer["dtype"],
                      " + ".join(str(tuple(s)) for s in layer["shapes"]),
                      " + ".join(str(tuple(s)) for s in layer["strides"]))
    return table


def _check_line(allocation: dict[str, Any]) -> str:
    check = allocation["slot_mapping_check"]
    verdict = "[green]PASSED[/]" if check["passed"] else "[red]FAILED[/]"
    where = (f"on a real {check['pool_blocks']}-block CPU pool with the same layout"
             if not allocation["real"] else f"on the allocated pool ({allocation['device']})")
    parts = [
        f"Slot-mapping round trip {verdict} {where}: {check['tokens']} tokens written through "
        f"slot = block x block_size + offset into blocks {escape(str(check['block_table']))} of "
        f"{check['layers_checked']} tensors"
    ]
    marks = {"view_round_trip": "read back from the view", "raw_bytes_match": "read back from the raw bytes",
             "untouched_blocks_zero": "other blocks still zero", "shared_storage": "views share their tensor"}
    parts.append(", ".join(f"{'ok' if check[key] else 'NO'} {text}" for key, text in marks.items()))
    if check["detail"]:
        parts.append(escape(check["detail"]))
    if allocation["committed_bytes"] is not None:
        parts.append(f"committed while allocating: {human_bytes(allocation['committed_bytes'])}")
    return "; ".join(parts)


def _workload_check(check: dict[str, Any] | None, console: Console) -> None:
    if check is None:
        console.print("Workload check: not run, the configuration does not fit (no KV cache was allocated)")
        return
    verdict = "[green]PASSED[/]" if check["passed"] else "[red]FAILED[/]"
    verified = " and ".join(check["layers_verified"])
    console.print(
        f"Workload check {verdict} on the allocated pool: {escape(check['workload'])}, {check['steps']:,} steps; "
        f"{check['tokens_written']:,} scheduled tokens' K/V written through each step's slot mapping into "
        f"{check['tensors_written']} tensors; {check['tokens_verified']:,} tokens read back through the block tables "
        f"from {escape(verified)} (every {check['verify_every_steps']} steps and at each request's end), "
        f"{check['prefix_hit_tokens_verified']:,} of them prefix-cache hits: {check['mismatched_tokens']:,} mismatches"
    )
    simulation = check["simulation"]
    kv, preemptions, prefix = simulation["kv_usage"], simulation["preemptions"], simulation["prefix_cache"]
    engine = check["engine"]
    table = Table(title="Workload on this pool", title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    hit_rate = prefix["prefix_cache_hit_rate"]
    rows = [
        ("pool", f"{engine['num_gpu_blocks']:,} blocks of {engine['block_size']} tokens"),
        ("requests finished", f"{simulation['num_finished']:,} of {simulation['num_requests']:,}"
         + (" (stalled)" if simulation["stalled"] else "")),
        ("peak KV usage", f"{kv['peak_used_blocks']:,} blocks ({kv['peak_usage']:.1%})"),
        ("preemptions", f"{preemptions['total']:,} ({preemptions['recomputed_tokens']:,} tokens recomputed)"),
        ("prefix-cache hit rate", "-" if hit_rate is None else f"{hit_rate:.1%}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    for note in check["notes"]:
        console.print(f"[dim]note:[/] {escape(note)}")
    if check["finding"]:
        console.print(f"[bold red]Finding:[/] {escape(check['finding'])}")


def render_profile(record: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(highlight=False)
    console.print(_title(record))
    console.print(_breakdown(record))
    for table in (_layout(record), _tensors(record)):
        if table is not None:
            console.print(table)
    if record["allocation"] is not None:
        console.print(_check_line(record["allocation"]))
    if "workload_check" in record:
        _workload_check(record["workload_check"], console)
    console.print("[bold]vLLM would log:[/]")
    for line in record["vllm_log"]:
        console.print(f"  {line}", markup=False)
    target = record["target"]
    if target is not None:
        longest = record["largest_max_model_len"]
        console.print(f"Largest max_model_len that fits: [bold]{longest:,}[/]" if longest else
                      "Not even one token fits in the KV cache.")
        util = target["gpu_memory_utilization"]
        console.print(
            f"One {target['max_model_len']:,}-token request needs {_exact(target['kv_cache_memory_bytes'])} B of KV "
            f"cache: --kv-cache-memory {target['kv_cache_memory_bytes']}"
            + (f", or --gpu-memory-utilization {util}" if util is not None else
               " (no gpu_memory_utilization reaches it on this GPU)")
        )
        suggestion = target["vllm_suggestion"]
        console.print(
            f"vLLM's own suggestion (CUDA graphs taken as {_gib(suggestion['cuda_graph_bytes_assumed'])}): "
            f"--kv-cache-memory={suggestion['to_requested_limit_bytes']} to fit into requested memory, "
            f"--kv-cache-memory={suggestion['to_gpu_limit_bytes']} to use the whole GPU", markup=False,
        )
    for warning in record["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    if not record["fits"]:
        console.print(f"[bold red]Finding:[/] {escape(record['error'])}")
