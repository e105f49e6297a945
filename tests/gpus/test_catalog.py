import pytest

from kvplan.errors import KvplanError
from kvplan.gpus.catalog import DEFAULT_GPU, get_gpu, list_gpus


def test_exact_torch_total_is_used_where_known():
    h100 = get_gpu(DEFAULT_GPU)
    assert h100.total_bytes == 85_045_477_376
    assert not h100.total_is_approximate
    assert h100.compute_capability == (9, 0)


def test_torch_total_to_the_mib_is_marked_approximate():
    h200 = get_gpu("h200-141gb")
    assert h200.total_bytes == 143_156 * 2**20
    assert h200.total_is_approximate


def test_nvidia_smi_total_is_the_last_resort():
    gb200 = get_gpu("gb200-186gb")
    assert gb200.total_bytes == 189_471 * 2**20
    assert gb200.total_is_approximate


def test_unique_prefix_resolves_and_unknown_gpu_names_candidates():
    assert get_gpu("h200").key == "h200-141gb"
    with pytest.raises(KvplanError, match="kvplan gpus"):
        get_gpu("tpu-v9")


def test_every_row_has_a_positive_total():
    gpus = list_gpus()
    assert len(gpus) == 29
    assert all(gpu.total_bytes > 0 for gpu in gpus)
    assert all(gpu.compute_capability is None for gpu in gpus if gpu.vendor == "AMD")


def test_non_torch_column_is_empty_until_measured():
    # no sourced per-GPU non-torch figure exists yet; a value would come from a cuda-backend profile
    assert all(gpu.non_torch_bytes is None for gpu in list_gpus())
