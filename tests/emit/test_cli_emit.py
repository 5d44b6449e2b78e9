"""`openinfer emit`: writes the sources, prints the memory plan, errors are one line + exit 1."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from openinfer_jax.cli import main
from openinfer_jax.emit import Synthesizer
from openinfer_jax.ir import format_graph
from tests.emit.cases import CASES, test_arch


def _graph_file(tmp: Path, name: str) -> tuple[Path, Path]:
    case = CASES[name](tmp)
    graph = case.graph if isinstance(case.graph, str) else format_graph(case.graph)
    path = tmp / f"{name}.graph"
    path.write_text(graph)
    return case.model, path


def test_emit_c_writes_sources(tmp_path: Path, capsys) -> None:
    model, graph = _graph_file(tmp_path, "mlp")
    out = tmp_path / "out"
    rc = main(
        [
            "emit",
            "c",
            "--model",
            str(model),
            "--graph",
            str(graph),
            "-o",
            str(out),
            "--name",
            "mlp",
            "--output",
            "y",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "memory: arena" in printed and f"wrote 8 files to {out}" in printed
    assert sorted(p.name for p in out.iterdir()) == [
        ".openinfer-emit",
        "mlp.c",
        "mlp.h",
        "mlp_driver.c",
        "oi_gemm.h",  # the mlp's matmuls run on the header-only GEMM (one thread: no oi_pool.h)
        "oi_parallel.h",
        "oi_runtime.c",
        "oi_runtime.h",
        "oi_vec.h",
    ]
    assert "int oi_fetch_y(float *out" in (out / "mlp.h").read_text()
    assert "oi_fetch_h" not in (out / "mlp.h").read_text()
    # the printed build line builds the driver as printed
    line = next(x for x in printed.splitlines() if x.startswith("build the test driver: cd "))
    command = line.split(" && ", 1)[1]
    assert command.startswith("cc -std=c99 ") and command.endswith(" -lm -o driver")
    subprocess.run(shlex.split(command), cwd=out, check=True, capture_output=True)
    assert (out / "driver").is_file()
    assert "or on .npy inputs: openinfer run --target c" in printed


def test_emit_with_arch_and_errors(tmp_path: Path, capsys) -> None:
    model, graph = _graph_file(tmp_path, "cache_window_slice")
    out = tmp_path / "out"
    rc = main(["emit", "c", "--model", str(model), "--graph", str(graph), "-o", str(out)])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cache table 'A': index 't' is unbounded") and err.count("\n") == 1
    assert not out.exists()
    arch = tmp_path / "dev.json"
    arch.write_text(json.dumps(test_arch(cache_capacity=32)))
    rc = main(
        [
            "emit",
            "c",
            "--model",
            str(model),
            "--graph",
            str(graph),
            "--arch",
            str(arch),
            "-o",
            str(out),
        ]
    )
    assert rc == 0 and (out / "model.c").exists()
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"device": {}}))
    rc = main(
        [
            "emit",
            "c",
            "--model",
            str(model),
            "--graph",
            str(graph),
            "--arch",
            str(broken),
            "-o",
            str(out),
        ]
    )
    assert rc == 1 and "missing field device.type" in capsys.readouterr().err


def test_emit_vulkan_from_cli(tmp_path: Path, capsys) -> None:
    model, graph = _graph_file(tmp_path, "minimal")
    out = tmp_path / "vk"
    rc = main(["emit", "vulkan", "--model", str(model), "--graph", str(graph), "-o", str(out)])
    if rc != 0:  # only without glslc: the message says so
        assert "needs glslc" in capsys.readouterr().err
        return
    names = sorted(p.name for p in out.iterdir())
    assert "oi_vulkan.c" in names and any(n.endswith(".comp") for n in names)


def test_emit_vulkan_strict_names_the_host_node(tmp_path: Path, capsys) -> None:
    model, graph = _graph_file(tmp_path, "quantized_linear")
    out = tmp_path / "vk"
    argv = ["emit", "vulkan", "--model", str(model), "--graph", str(graph), "-o", str(out)]
    rc = main([*argv, "--strict"])
    err = capsys.readouterr().err
    assert rc == 1 and "runs on the host in the Vulkan target (packed i4" in err
    assert "strict mode" in err and not out.exists()


def test_sources_do_not_depend_on_the_graph_path(tmp_path: Path, monkeypatch) -> None:
    """The same graph given by a relative and by an absolute path (and from two folders)
    emits byte-identical sources; messages name the file by its base name."""
    model, graph = _graph_file(tmp_path, "kv_cache_decode")
    arch = tmp_path / "dev.json"
    arch.write_text(json.dumps(test_arch(cache_capacity=16)))
    other = tmp_path / "deeper" / "folder"
    other.mkdir(parents=True)
    moved = other / graph.name
    moved.write_text(graph.read_text())
    monkeypatch.chdir(tmp_path)
    outs = []
    for k, path in enumerate([Path(graph.name), moved.resolve()]):
        out = tmp_path / f"out{k}"
        argv = ["emit", "c", "--model", str(model), "--graph", str(path), "--arch", str(arch)]
        assert main([*argv, "-o", str(out)]) == 0
        outs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outs[0] == outs[1]
    source = outs[1]["model.c"].decode()
    assert f"at {graph.name}:" in source
    assert str(tmp_path) not in source and "folder" not in source


def test_python_built_graphs_name_their_file_without_its_folder(tmp_path: Path) -> None:
    case = CASES["mlp"](tmp_path)  # built by examples/mlp.py: locations are in that file
    plan = Synthesizer("c").synthesize(case.model, case.graph, name="mlp")
    assert "at mlp.py:" in plan.files["mlp.c"]
    assert str(Path(__file__).parents[2]) not in plan.files["mlp.c"]


def test_emit_llama_arch_needs_no_graph_file(tmp_path: Path, capsys) -> None:
    from tests.models.tiny import write_tiny_llama

    model = write_tiny_llama(tmp_path / "llama.oinf")
    out = tmp_path / "out"
    code = main(["emit", "c", "--model", str(model), "--arch", "llama", "--chunk", "4",
                 "--context", "16", "--arch", "cortex-a53", "-o", str(out), "--name", "llm"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert (out / "llm.c").is_file() and "oi_insert_tokens" in (out / "llm.h").read_text()
    assert (
        main(["emit", "c", "--model", str(model), "--arch", "bert", "-o", str(tmp_path / "b")]) == 1
    )
    assert "--arch bert needs the sizevar" in capsys.readouterr().err
    assert main(["emit", "c", "--model", str(model), "--arch", "cortex-a53", "--arch", "ada-mock",
                 "--graph", "g", "-o", str(tmp_path / "c")]) == 1  # fmt: skip
    assert "two devices" in capsys.readouterr().err
