"""Reading inputs without surprises and writing outputs without losses."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.files import atomic_output, inside, parse_json, parse_toml, read_input_text, same_file


def test_only_regular_utf8_files_of_bounded_size_are_read(tmp_path: Path):
    for path, says in ((Path("/dev/zero"), "not a regular file"), (tmp_path, "is a directory"),
                       (tmp_path / "nope.json", "file not found")):
        with pytest.raises(KvplanError, match=says):
            read_input_text(path, path.name)
    big = tmp_path / "big.json"
    big.write_text("x" * 100)
    with pytest.raises(KvplanError, match="100 bytes, more than"):
        read_input_text(big, "big.json", limit=64)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b"{\"a\": \"\xe9\"}")
    with pytest.raises(KvplanError, match=r"not UTF-8 text \(byte 7"):
        read_input_text(latin, "latin.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(KvplanError, match="not a regular file"):
        read_input_text(fifo, "fifo")


@pytest.mark.parametrize(("parse", "text", "says"), [
    (parse_json, "[" * 100_000 + "]" * 100_000, "nests too deeply"),
    (parse_json, '{"a": ' + "9" * 5000 + "}", "a number of more than 4,300 digits"),
    (parse_json, '{"a": 1,', "not valid JSON (line 1"),
    (parse_toml, "a = " + "[" * 100_000, "nests too deeply"),
    (parse_toml, "a = " + "9" * 5000, "a number of more than 4,300 digits"),
    (parse_toml, "a = = 1", "not valid TOML"),
])
def test_documents_that_would_crash_a_parser_are_one_line(parse, text, says):
    with pytest.raises(KvplanError, match=re.escape(says)) as error:
        parse(text, "doc")
    assert "\n" not in str(error.value)


def test_one_file_under_many_names(tmp_path: Path):
    original = tmp_path / "spec.toml"
    original.write_text("x")
    (tmp_path / "link.toml").symlink_to(original)
    os.link(original, tmp_path / "hard.toml")
    assert same_file(original, tmp_path / "link.toml") and same_file(original, tmp_path / "hard.toml")
    assert same_file(original, tmp_path / "sub" / ".." / "spec.toml")
    assert not same_file(original, tmp_path / "other.toml")
    assert inside(tmp_path / "a" / "b.json", tmp_path) and not inside(tmp_path, tmp_path / "a")


def test_an_output_appears_whole_or_not_at_all(tmp_path: Path):
    target = tmp_path / "out.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    with pytest.raises(KeyboardInterrupt), atomic_output(target) as stream:
        stream.write("half of the new")
        raise KeyboardInterrupt
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    with atomic_output(target) as stream:
        stream.write("new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640
    fresh = tmp_path / "fresh.json"
    with atomic_output(fresh) as stream:
        stream.write("{}")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask   # not mkstemp's 0600
