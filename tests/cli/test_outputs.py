"""Output paths checked before any work: never an input (by any name), never twice, parents created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvplan.cli.outputs import prepare_outputs
from kvplan.errors import KvplanError


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    spec = tmp_path / "spec.toml"
    spec.write_text("x")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return spec, model


@pytest.mark.parametrize(("name", "says"), [
    ("spec.toml", "this command reads that file"),
    ("sub/../spec.toml", "the same file as"),
    ("link.toml", "the same file as"),
    ("hard.toml", "the same file as"),
    ("model/config.json", "a file in"),
    ("model", "is a directory"),
    ("bad\x00name", "control character"),
])
def test_an_output_that_names_an_input_is_refused(tmp_path, inputs, name, says):
    (tmp_path / "link.toml").symlink_to(inputs[0])
    os.link(inputs[0], tmp_path / "hard.toml")
    (tmp_path / "sub").mkdir()
    with pytest.raises(KvplanError, match=says):
        prepare_outputs([("--junit", tmp_path / name)], inputs)
    assert inputs[0].read_text() == "x" and (inputs[1] / "config.json").read_text() == "{}"


def test_two_outputs_naming_one_file(tmp_path, inputs):
    with pytest.raises(KvplanError, match="-o and --timeline name one file"):
        prepare_outputs([("-o", tmp_path / "a.csv"), ("--timeline", tmp_path / "." / "a.csv")], inputs)


def test_missing_parents_are_created_and_new_files_in_a_model_directory_are_fine(tmp_path, inputs):
    prepare_outputs([("--save", tmp_path / "profiles" / "deep" / "x.json"), ("-o", inputs[1] / "new.json")],
                    inputs)
    assert (tmp_path / "profiles" / "deep").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(KvplanError, match="is not a directory"):
        prepare_outputs([("--save", tmp_path / "file" / "x.json")], inputs)
