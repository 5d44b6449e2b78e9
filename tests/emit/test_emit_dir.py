"""`Plan.emit` / `openinfer emit -o DIR` never deletes or overwrites a file it did not write:
a non-empty directory without emit's manifest is refused unless forced; re-emitting into an
emitted directory replaces emit's files, drops the ones the new program lacks, keeps the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from openinfer_jax.cli import main
from openinfer_jax.emit import MANIFEST, MemoryPlan, Plan
from openinfer_jax.errors import SynthesisError
from tests.emit.test_cli_emit import _graph_file


def _plan(name: str = "p", **files: str) -> Plan:
    return Plan("c", name, files or {f"{name}.c": "int a;\n"}, MemoryPlan(), 0, ())


def _tree(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def test_a_foreign_directory_is_refused_and_left_alone(tmp_path: Path, capsys) -> None:
    model, graph = _graph_file(tmp_path, "mlp")
    out = tmp_path / "work"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "model.oinf").write_bytes(model.read_bytes())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    argv = ["emit", "c", "--model", str(model), "--graph", str(graph), "-o", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "is not empty" in err and "was not written by openinfer emit" in err
    assert "--force" in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.oinf", "mlp.graph", "work"]
    # --force adds the sources and keeps every other file.
    assert main([*argv, "--force"]) == 0
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after["notes.txt"] == b"mine" and after["model.oinf"] == model.read_bytes()
    assert {"model.c", "model.h", "oi_runtime.c", MANIFEST} <= set(after)


def test_re_emit_replaces_own_files_and_keeps_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _plan("first").emit(out)
    (out / "notes.txt").write_text("mine")
    (out / "driver").write_text("a build output")
    _plan("second").emit(out)  # no force needed: the directory is emit's
    assert _tree(out) == {
        MANIFEST: "second.c\n",
        "driver": "a build output",
        "notes.txt": "mine",
        "second.c": "int a;\n",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporaries left


def test_a_file_emit_did_not_write_is_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _plan("first").emit(out)
    (out / "second.c").write_text("my own second.c")
    with pytest.raises(SynthesisError, match=r"second\.c would be overwritten but was not written"):
        _plan("second").emit(out)
    assert (out / "second.c").read_text() == "my own second.c"
    assert (out / "first.c").exists()


def test_a_failed_update_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _plan("first").emit(out)
    before = _tree(out)
    with pytest.raises(SynthesisError, match="cannot emit into"):
        _plan("bad", **{"ok.c": "int a;\n", "sub/x.c": "int x;\n"}).emit(out)
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_manifest_names_only_files_inside_the_directory(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text("../victim.txt\n/etc/passwd\nold.c\n")
    (out / "old.c").write_text("emitted before")
    _plan("new").emit(out)
    assert victim.read_text() == "keep"
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "new.c"]
