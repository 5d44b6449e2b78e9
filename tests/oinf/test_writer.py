"""Writer behaviour: atomic publication, overwrite policy, and typed errors for bad declarations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import (
    Bitset,
    DType,
    ModelLoader,
    OinfWriter,
    QuantParams,
    QuantScale,
    QuantZeroPoint,
    write_oinf,
)


def _files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_loader_exception_leaves_existing_destination_intact(tmp_path: Path) -> None:
    dest = write_oinf(tmp_path / "m.oinf", tensors={"old": np.arange(3, dtype=np.float32)})
    before = dest.read_bytes()

    def boom() -> np.ndarray:
        raise RuntimeError("disk on fire")

    with (
        pytest.raises(
            OinfFormatError, match=r"tensor 'b'.*loader raised RuntimeError: disk on fire"
        ),
        OinfWriter(dest) as w,
    ):
        w.add_tensor("a", np.ones(1000, dtype=np.float32))
        w.add_tensor("b", dtype=DType.F32, shape=(4,), loader=boom)
    assert dest.read_bytes() == before
    assert _files(tmp_path) == {"m.oinf"}  # no temporary file left behind


def test_exception_inside_with_block_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(KeyError), OinfWriter(tmp_path / "m.oinf") as w:
        w.add_tensor("a", np.ones(3, dtype=np.float32))
        raise KeyError("user bug")
    assert _files(tmp_path) == set()


def test_loader_wrong_shape_is_rejected_atomically(tmp_path: Path) -> None:
    with (
        pytest.raises(OinfFormatError, match=r"loader returned shape \(3,\), declared \(4,\)"),
        OinfWriter(tmp_path / "x.oinf") as w,
    ):
        w.add_tensor("a", dtype=DType.F32, shape=(4,), loader=lambda: np.ones(3))
    assert _files(tmp_path) == set()


def test_overwrite_false(tmp_path: Path) -> None:
    dest = write_oinf(tmp_path / "m.oinf")
    with pytest.raises(OinfFormatError, match="exists"):
        OinfWriter(dest, overwrite=False)
    w = OinfWriter(tmp_path / "n.oinf", overwrite=False)
    dest2 = write_oinf(tmp_path / "n.oinf")  # appears while the writer is open
    before = dest2.read_bytes()
    w.add_sizevar("B", 3)
    with pytest.raises(OinfFormatError, match="exists"):
        w.close()
    assert dest2.read_bytes() == before and _files(tmp_path) == {"m.oinf", "n.oinf"}


def test_overwrite_true_replaces(tmp_path: Path) -> None:
    dest = write_oinf(tmp_path / "m.oinf", sizevars={"A": 1})
    write_oinf(dest, sizevars={"A": 2})
    with ModelLoader.open(dest) as m:
        assert m.size_of("A") == 2


BAD_DECLARATIONS = [
    ("bad name", lambda w: w.add_tensor("a b", np.ones(1)), "must be 1\\+ characters"),
    ("non-ascii name", lambda w: w.add_sizevar("größe", 1), "must be 1\\+ characters"),
    ("empty name", lambda w: w.add_metadata("", 1), "must be 1\\+ characters"),
    ("duplicate", lambda w: (w.add_sizevar("B", 1), w.add_sizevar("B", 2)), "declared twice"),
    ("negative sizevar", lambda w: w.add_sizevar("B", -1), "outside the u64 range"),
    ("float sizevar", lambda w: w.add_sizevar("B", 1.5), "must be an int"),
    ("bitset tensor", lambda w: w.add_tensor("t", dtype=DType.BITSET, shape=(3,)), "metadata-only"),
    (
        "i4 out of range",
        lambda w: w.add_tensor("t", np.array([8]), dtype=DType.I4),
        r"\[-8, 7\], element 0 is 8",
    ),
    ("u8 overflow", lambda w: w.add_tensor("t", np.array([256]), dtype=DType.U8), r"\[0, 255\]"),
    ("t1 zero", lambda w: w.add_tensor("t", np.array([1, 0]), dtype=DType.T1), "t1"),
    ("float to int", lambda w: w.add_tensor("t", np.array([1.5]), dtype=DType.I32), "non-integral"),
    ("object array", lambda w: w.add_tensor("t", np.array(["x"])), "no .oinf equivalent"),
    ("shape mismatch", lambda w: w.add_tensor("t", np.ones(3), shape=(4,)), "does not match"),
    ("no dtype", lambda w: w.add_tensor("t", shape=(4,)), "needs dtype= and shape="),
    (
        "data and loader",
        lambda w: w.add_tensor("t", np.ones(1), loader=lambda: np.ones(1)),
        "not both",
    ),
    ("negative dim", lambda w: w.add_tensor("t", dtype=DType.F32, shape=(-1,)), "dims must be"),
    (
        "quant axis",
        lambda w: w.add_tensor(
            "t",
            np.ones((2, 3), np.int8),
            quant=QuantParams.symmetric(QuantScale.per_channel(2, [1.0])),
        ),
        "R31",
    ),
    (
        "quant count",
        lambda w: w.add_tensor(
            "t",
            np.ones((2, 3), np.int8),
            quant=QuantParams.symmetric(QuantScale.per_channel(1, [1.0])),
        ),
        "R31",
    ),
    (
        "symmetric zp",
        lambda w: w.add_tensor(
            "t",
            np.ones(2, np.int8),
            quant=QuantParams(
                "symmetric",
                QuantScale.per_tensor(1.0),
                QuantZeroPoint.per_tensor(1),
            ),
        ),
        "symmetric",
    ),
    (
        "zp mode mismatch",
        lambda w: w.add_tensor(
            "t",
            np.ones(2, np.int8),
            quant=QuantParams.asymmetric(
                QuantScale.per_tensor(1.0), QuantZeroPoint.per_channel(0, [1, 2])
            ),
        ),
        "must match scale mode",
    ),
    ("metadata list", lambda w: w.add_metadata("m", [1, 2]), "unsupported metadata type list"),
    ("metadata non-ascii", lambda w: w.add_metadata("m", "naïve"), "printable ASCII"),
    ("metadata huge int", lambda w: w.add_metadata("m", 2**64), "does not fit in 64 bits"),
    ("metadata forced range", lambda w: w.add_metadata("m", (300, DType.U8)), r"\[0, 255\]"),
    (
        "metadata bitset type",
        lambda w: w.add_metadata("m", ("x", DType.BITSET)),
        "must be a Bitset",
    ),
]


@pytest.mark.parametrize(
    "declare,message",
    [(d, m) for _, d, m in BAD_DECLARATIONS],
    ids=[i for i, _, _ in BAD_DECLARATIONS],
)
def test_bad_declarations_raise_typed_errors(tmp_path: Path, declare, message: str) -> None:  # type: ignore[no-untyped-def]
    w = OinfWriter(tmp_path / "m.oinf")
    with pytest.raises(OinfFormatError, match=message):
        declare(w)
    w.abort()
    assert _files(tmp_path) == set()


def test_version1_rejects_quant(tmp_path: Path) -> None:
    w = OinfWriter(tmp_path / "v1.oinf", version=1)
    with pytest.raises(OinfFormatError, match="needs format version 2"):
        w.add_tensor(
            "q", np.ones(2, np.int8), quant=QuantParams.symmetric(QuantScale.per_tensor(1.0))
        )


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"version": 3}, "version must be 1 or 2"),
        ({"align": 12}, "power of two"),
        ({"align": 4}, "power of two"),
    ],
)
def test_bad_writer_options(tmp_path: Path, kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(OinfFormatError, match=message):
        OinfWriter(tmp_path / "m.oinf", **kwargs)


def test_closed_writer_rejects_more_declarations(tmp_path: Path) -> None:
    w = OinfWriter(tmp_path / "m.oinf")
    w.close()
    with pytest.raises(OinfFormatError, match="already closed"):
        w.add_metadata("x", Bitset([1]))


def test_align_places_blobs(tmp_path: Path) -> None:
    tensors = {f"t{i}": np.ones(i + 1, dtype=np.float32) for i in range(5)}
    for align in (8, 64, 4096):
        with ModelLoader.open(
            write_oinf(tmp_path / f"a{align}.oinf", align=align, tensors=tensors)
        ) as m:
            assert all(t.data_offset % align == 0 for t in m.tensors.values())


def test_quant_params_accept_scheme_names() -> None:
    assert QuantParams("symmetric", QuantScale.per_tensor(1.0)) == QuantParams.symmetric(
        QuantScale.per_tensor(1.0)
    )
    assert QuantParams(2, QuantScale.per_tensor(1.0)).scheme.name == "ASYMMETRIC"
    with pytest.raises(OinfFormatError, match="scheme must be"):
        QuantParams("linear", QuantScale.per_tensor(1.0))
    with pytest.raises(OinfFormatError, match="must be a QuantScale"):
        QuantParams("symmetric", 0.5)  # type: ignore[arg-type]


def test_killed_writer_leaves_no_temporary(tmp_path: Path) -> None:
    """kill -9 in the middle of writing leaves no destination; the next write of the same
    destination removes the hidden `.NAME.PID-RANDOM.tmp` of the killed process."""
    import signal
    import subprocess
    import sys
    import time

    dest = tmp_path / "big.oinf"
    script = (
        "import time, numpy as np\n"
        "from openinfer_jax.oinf import OinfWriter\n"
        f"with OinfWriter({str(dest)!r}) as w:\n"
        "    def slow():\n"
        "        print('writing', flush=True); time.sleep(60); return np.zeros(4, np.float32)\n"
        "    w.add_tensor('a', np.ones(1 << 18, np.float32))\n"
        "    w.add_tensor('b', dtype=DType.F32, shape=(4,), loader=slow)\n"
    ).replace("import time, numpy", "from openinfer_jax.oinf import DType\nimport time, numpy")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not dest.exists()
    # and any other temporary of a process that is gone (another user's live one stays)
    stale = tmp_path / f".big.oinf.{_dead_pid()}-0badf00d.tmp"
    stale.write_bytes(b"partial")
    other = tmp_path / ".other.oinf.1-0badf00d.tmp"
    other.write_bytes(b"not ours")
    time.sleep(0.01)
    write_oinf(dest, tensors={"a": np.ones(2, np.float32)})
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert leftovers == [other.name]


def _dead_pid() -> int:
    import os

    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
        pid += 1


def test_file_size_limit_is_a_typed_error(tmp_path: Path) -> None:
    """`ulimit -f` (EFBIG; a full disk is the same path): OinfFormatError, nothing written."""
    import subprocess
    import sys

    dest = tmp_path / "big.oinf"
    script = (
        "import resource, numpy as np\n"
        "from openinfer_jax.errors import OinfFormatError\n"
        "from openinfer_jax.oinf import write_oinf\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))\n"
        "try:\n"
        f"    write_oinf({str(dest)!r}, tensors={{'a': np.ones(1 << 16, np.float32)}})\n"
        "except OinfFormatError as err:\n"
        "    print('typed:', err)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("typed: cannot write") and "nothing was written" in out.stdout
    assert not dest.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
