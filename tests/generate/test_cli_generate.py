"""`openinfer generate` through the CLI entry point and as a fresh process (compile cache)."""

from __future__ import annotations

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


@pytest.mark.slow
def test_second_process_loads_compiled_regions_from_the_cache(tiny: Path, tmp_path: Path) -> None:
    """Two fresh processes: the second finds every executable in the persistent cache."""
    script = (
        "import sys, jax.monitoring as m\n"
        "hits = []\n"
        "m.register_event_listener(lambda e, **k: hits.append(e) if e.endswith('cache_hits') else None)\n"
        "from openinfer_jax.cli import main\n"
        f"code = main(['generate', {str(tiny)!r}, 'the cat', '-n', '3', '--chunk', '4', '--context', '16'])\n"
        "print('HITS', len(hits), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "OPENINFER_COMPILE_CACHE": str(tmp_path / "jax"), "PYTHONPATH": str(ROOT)}
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
    hits = [int(run.stderr.split("HITS")[1].split()[0]) for run in runs]
    assert hits[0] == 0 and hits[1] > 0
    assert any((tmp_path / "jax").iterdir())
    # and nothing was written outside the chosen directory by default settings of this test
    env_off = {**env, "OPENINFER_COMPILE_CACHE": "0"}
    off = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env_off
    )
    assert off.returncode == 0 and "HITS 0" in off.stderr
