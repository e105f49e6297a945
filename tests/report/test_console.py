import io

import pytest
from rich.console import Console

from kvplan.gpus.catalog import list_gpus
from kvplan.report import console as console_report
from kvplan.semantics.releases import VLLM_0_33_0
from kvplan.usecases.plan import catalog_entries, gpu_batch_defaults

WIDTHS = [20, 40, 60, 80, 93, 94, 100, 120, 200]


def render_gpus(gpus, console):
    console_report.render_gpus(gpus, gpu_batch_defaults(gpus, VLLM_0_33_0), VLLM_0_33_0, console)


def render_models(entries, console):
    console_report.render_models(entries, VLLM_0_33_0, console)


def rendered(render, entries, width: int) -> list[str]:
    out = io.StringIO()
    render(entries, Console(file=out, width=width, highlight=False))
    return out.getvalue().splitlines()


def cells(lines: list[str]) -> set[str]:
    return {cell.strip() for line in lines for cell in line.replace("┃", "│").split("│")}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("render", "entries", "key"), [
    (render_gpus, list_gpus(), "key"), (render_models, catalog_entries(VLLM_0_33_0), "model_id"),
])
def test_keys_and_model_ids_are_printed_whole_at_any_width(render, entries, key, width):
    lines = rendered(render, entries, width)
    keys = [getattr(entry, key) for entry in entries]
    # each key is a cell of its own (the table's first column) or a line of its own (one block per row)
    assert set(keys) <= cells(lines) | {line.strip() for line in lines}
    assert not any("…" in line for line in lines)
    # nothing but a key wider than the console is wider than the console
    assert all(len(line) <= width for line in lines if line.strip() not in keys)


def test_the_gpu_table_holds_in_a_pipe_and_its_figures_stay_on_one_line():
    lines = rendered(render_gpus, list_gpus(), 80)
    assert lines[0] == "vLLM 0.33.0 semantics"
    assert lines[2].split("┃")[0].strip() == "" and "key" in lines[3]      # a table, headers wrapped
    h100 = next(gpu for gpu in list_gpus() if gpu.key == "h100-sxm-80gb")
    row = next(line for line in lines if line.startswith("h100-sxm-80gb "))
    assert [cell.strip() for cell in row.split("│")][2:] == [
        f"{h100.total_bytes:,}", f"{h100.memory_gib:.2f}", f"{h100.bf16_tflops:g}", f"{h100.bandwidth_gbps:g}",
        h100.arch,
    ]


def test_models_too_wide_for_the_console_are_one_block_per_row():
    lines = rendered(render_models, catalog_entries(VLLM_0_33_0), 80)
    at = lines.index("meta-llama/Llama-3.1-8B-Instruct")
    assert lines[at + 1:at + 7] == [
        "  architecture: LlamaForCausalLM", "  layers: 32", "  layer kinds: 32 full", "  max len: 131,072",
        "  dtype: bfloat16", "  KV B/token: 131,072",
    ]
    assert any(line.startswith("meta-llama/Llama-3.1-8B-Instruct ") for line in rendered(
        render_models, catalog_entries(VLLM_0_33_0), 120))


def test_the_gpu_listing_gives_the_batch_defaults_of_the_release():
    lines = rendered(render_gpus, list_gpus(), 80)
    title = [line.strip() for line in lines].index("What `vllm serve` 0.33.0 picks on each GPU")
    h100 = next(line for line in lines[title:] if line.startswith("h100-sxm-80gb "))
    assert [cell.strip() for cell in h100.split("│")] == ["h100-sxm-80gb", "8,192", "1,024"]
