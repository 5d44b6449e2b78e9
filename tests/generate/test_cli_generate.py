"""`openinfer generate` through the CLI entry point and as a fresh process (compile cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openinfer_jax.cli import main
from tests.models.tiny import write_tiny_llama

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("cli") / "tiny.oinf")


def test_generate_streams_text_and_reports_speed(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "generate",
            str(tiny),
            "the cat sat",
            "-n",
            "5",
            "--no-stop",
            "--chunk",
            "4",
            "--context",
            "32",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out.strip()  # the text
    assert "prompt tokens in 2 step(s)" in captured.err and "decode" in captured.err
    assert "stop: length" in captured.err and "per CPU second: prefill" in captured.err
    assert (
        main(
            [
                "generate",
                str(tiny),
                "the cat sat",
                "-n",
                "3",
                "--ids",
                "--no-stop",
                "--chunk",
                "4",
                "--context",
                "32",
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.split()) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--context", "4"], "but the cache holds 4 (context); raise --context"),
        (["--top-p", "2"], "top_p must be in (0, 1]"),
        (["--chat", "--tokenizer", "/nonexistent.json"], "cannot read the tokenizer file"),
    ],
)
def test_bad_generate_input_is_one_line(
    tiny: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["generate", str(tiny), "the cat sat on the mat", "--chunk", "2", *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_generate_rejects_a_non_llama_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.models.test_bert import write_tiny_bert

    assert main(["generate", str(write_tiny_bert(tmp_path / "b.oinf")), "hi"]) == 1
    assert (
        "does not match --arch llama" in capsys.readouterr().err
        or "needs the sizevar" in capsys.readouterr().err
    )


_FRESH_PROCESS = """
import json, sys
from openinfer_jax.generate import Generator
with Generator(sys.argv[1], chunk=4, context=16) as gen:
    result = gen.generate("the cat", max_new_tokens=3, stop_at_eos=False)
    store = gen.runner.sim.wide.store
    print(json.dumps({
        "tokens": result.tokens, "stats": gen.runner.ex.stats,
        "loaded": store.loaded if store else None, "saved": store.saved if store else None,
    }))
"""


def _fresh_process(model: Path, cache: str) -> dict[str, object]:
    env = {**os.environ, "OPENINFER_COMPILE_CACHE": cache, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(model)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow
def test_second_process_loads_compiled_regions_from_the_cache(tiny: Path, tmp_path: Path) -> None:
    """Two fresh processes: the first compiles and stores every wide region, the second
    loads them all (no tracing, no compilation) and gives the same tokens. A damaged store
    file is compiled again, with the same tokens; with the cache off nothing is stored."""
    cache = tmp_path / "jax"
    first = _fresh_process(tiny, str(cache))
    stats = first["stats"]
    assert isinstance(stats, dict) and stats["compilations"] > 0 and first["loaded"] == 0
    assert first["saved"] == stats["compilations"]
    second = _fresh_process(tiny, str(cache))
    assert second["tokens"] == first["tokens"]
    assert second["loaded"] == first["saved"] and second["saved"] == 0
    assert isinstance(second["stats"], dict) and second["stats"]["compilations"] == 0
    assert second["stats"]["compile_cache_hits"] == first["saved"]
    regions = sorted((cache / "regions").glob("*.region"))
    assert len(regions) == first["saved"]
    for path in regions:
        path.write_bytes(path.read_bytes()[:100])
    damaged = _fresh_process(tiny, str(cache))
    assert damaged["tokens"] == first["tokens"] and damaged["loaded"] == 0
    off = _fresh_process(tiny, "0")
    assert off["tokens"] == first["tokens"] and off["loaded"] is None
