"""`openinfer run --target c|vulkan`: the emitted program driven from the CLI on .npy inputs
(built with the system compiler), with the simulator's results."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.cli import main
from tests.emit.harness import CC
from tests.emit.test_vulkan import needs_vulkan
from tests.sim.test_cli_run import STREAM_GRAPH, setup_files

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler {CC!r}")


@pytest.mark.parametrize("target", ["c", pytest.param("vulkan", marks=needs_vulkan)])
def test_stream_through_the_emitted_program_matches_the_simulator(
    tmp_path: Path, capsys, target: str
) -> None:
    model, graph, _ = setup_files(tmp_path)
    graph.write_text(STREAM_GRAPH)
    chunks = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "chunks.npy", chunks)
    outs = {}
    for run_on in ("sim", target):
        outs[run_on] = tmp_path / f"{run_on}.npz"
        code = main(["run", "--model", str(model), "--graph", str(graph), "--stream",
                     "--input", f"x={tmp_path / 'chunks.npy'}", "--fetch", "s",
                     "--output", str(outs[run_on]), "--target", run_on])  # fmt: skip
        assert code == 0, capsys.readouterr().err
    assert f"ran 3 step(s) through the emitted {target} program" in capsys.readouterr().out
    c_steps = np.load(outs[target])["s"]
    np.testing.assert_array_equal(c_steps, np.load(outs["sim"])["s"])
    np.testing.assert_array_equal(c_steps, np.cumsum(chunks + np.arange(4, dtype=np.float32), 0))


def test_llama_arch_through_emitted_c(tmp_path: Path, capsys) -> None:
    from tests.models.tiny import llama_reference, write_tiny_llama

    model = write_tiny_llama(tmp_path / "llama.oinf")
    np.save(tmp_path / "tokens.npy", np.array([[3], [17], [5]], np.int32))
    out = tmp_path / "out.npz"
    code = main(["run", "--model", str(model), "--arch", "llama", "--chunk", "1", "--context", "8",
                 "--stream", "--input", f"tokens={tmp_path / 'tokens.npy'}", "--fetch", "logits",
                 "--output", str(out), "--target", "c"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    logits = np.load(out)["logits"][:, 0]
    np.testing.assert_allclose(logits, llama_reference(model, [3, 17, 5]), atol=1e-4)


def test_bad_inputs_name_what_to_change(tmp_path: Path, capsys) -> None:
    model, graph, _ = setup_files(tmp_path)
    graph.write_text(STREAM_GRAPH)
    base = ["run", "--model", str(model), "--graph", str(graph), "--target", "c"]
    np.save(tmp_path / "f64.npy", np.ones((2, 4)))
    assert main([*base, "--stream", "--input", f"x={tmp_path / 'f64.npy'}"]) == 1
    err = capsys.readouterr().err
    assert "--input x: dtype float64 does not match the declaration f32; save it as float32" in err
    np.save(tmp_path / "wide.npy", np.ones((2, 5), np.float32))
    assert main([*base, "--stream", "--input", f"x={tmp_path / 'wide.npy'}"]) == 1
    err = capsys.readouterr().err
    assert "the emitted program failed" in err and "x" in err and "Traceback" not in err
    assert (
        main([*base, "--stream", "--input", f"x={tmp_path / 'wide.npy'}", "--trace", "t.json"]) == 1
    )
    assert "--trace: simulator options; drop them with --target c" in capsys.readouterr().err
