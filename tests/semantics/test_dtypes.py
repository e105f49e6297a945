"""One table of dtype names and sizes."""

from kvplan.semantics.dtypes import DTYPE_SIZE, dtype_size, normalize_dtype


def test_names_and_aliases():
    assert [normalize_dtype(v) for v in ("torch.bfloat16", "bf16", "half", "float", "fp32", None)] == [
        "bfloat16", "bfloat16", "float16", "float32", "float32", None]


def test_sizes():
    assert dtype_size("bfloat16") == 2 and dtype_size("float8_e4m3fn") == 1 and DTYPE_SIZE["float32"] == 4
