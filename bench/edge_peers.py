"""The peer side of bench/bench_edge.py, run with build/peervenv/bin/python (never imported
by the project): llama.cpp through llama-cpp-python, onnxruntime, and torch to export the
ONNX models. Each subcommand prints one JSON object on stdout.

  quantize SRC DST                       a GGUF converted to F32 (llama_model_quantize)
  llama GGUF --contexts 64,512 --steps N decode ms/token at each context (one thread), and
                                         the peak RSS so far (VmHWM)
  export-cnn WEIGHTS.npz OUT.onnx        the CNN of edge_workloads.py
  export-encoder WEIGHTS.npz OUT.onnx --layers L --heads H --eps E --inputs IN.npz
  ort MODEL.onnx IN.npz --reps N --threads T [--out OUT.npy]   mean run time of N runs
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import edge_workloads  # bench/edge_workloads.py, shared with bench_edge.py


def _quantize(args: argparse.Namespace) -> dict:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(
        str(args.src).encode(), str(args.dst).encode(), ctypes.byref(params)
    )
    return {"rc": int(rc)}


def decode_tokens(count: int) -> list[int]:
    """The token sequence both sides decode (ordinary ids of SmolLM2's vocabulary)."""
    return [100 + (7 * i) % 5000 for i in range(count)]


def _peak_rss_kb() -> int:
    """VmHWM, the peak resident memory of this process (ru_maxrss would report the forking
    parent's peak, kept across exec); -1 where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return -1


def _llama(args: argparse.Namespace) -> dict:
    import llama_cpp

    contexts = [int(c) for c in args.contexts.split(",")]
    # K/V cache element type: llama.cpp's default F16, or F32 (the simulator's and the emitted
    # C's tables: the same bytes read per context token)
    kv = {"f16": llama_cpp.GGML_TYPE_F16, "f32": llama_cpp.GGML_TYPE_F32}[args.kv]
    llm = llama_cpp.Llama(
        model_path=str(args.gguf), n_ctx=max(contexts) + args.steps + 8, n_threads=args.threads,
        n_threads_batch=args.threads, type_k=kv, type_v=kv, verbose=False,
    )  # fmt: skip
    tokens = decode_tokens(max(contexts) + args.steps)
    out = {}
    for ctx in contexts:
        llm.reset()
        llm.eval(tokens[:ctx])
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(args.steps):
            llm.eval([tokens[ctx + i]])
        out[str(ctx)] = {
            "cpu_ms": (time.process_time() - c0) * 1e3 / args.steps,
            "wall_ms": (time.perf_counter() - w0) * 1e3 / args.steps,
            "peak_rss_kb": _peak_rss_kb(),  # so far: the last context's is the process' peak
        }
    return out


def _export(model, example: tuple, names: list[str], out: Path) -> dict:
    import torch

    torch.set_num_threads(1)
    with torch.no_grad():
        torch.onnx.export(model, example, str(out), input_names=names, output_names=["y"],
                          opset_version=17, dynamo=False)  # fmt: skip
    return {"onnx": str(out)}


def _export_cnn(args: argparse.Namespace) -> dict:
    import torch

    weights = dict(np.load(args.weights))
    model = edge_workloads.cnn_torch(weights)
    return _export(model, (torch.zeros(1, 3, args.size, args.size),), ["x"], args.out)


def _export_encoder(args: argparse.Namespace) -> dict:
    import torch

    weights = dict(np.load(args.weights))
    model = edge_workloads.encoder_torch(weights, args.layers, args.heads, args.eps)
    feed = dict(np.load(args.inputs))
    names = ["ids", "types", "positions", "mask", "pool"]
    example = tuple(
        torch.from_numpy(feed[n].astype(np.int64) if feed[n].dtype == np.int32 else feed[n])
        for n in names
    )
    return _export(model, example, names, args.out)


def _ort(args: argparse.Namespace) -> dict:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(args.model), opts, providers=["CPUExecutionProvider"])
    feed = dict(np.load(args.inputs))
    types = {i.name: i.type for i in sess.get_inputs()}
    feed = {
        k: (v.astype(np.int64) if "int64" in types.get(k, "") else v)
        for k, v in feed.items()
        if k in types
    }
    result = sess.run(None, feed)  # the first run allocates and plans
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(args.reps):
        result = sess.run(None, feed)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    if args.out:
        np.save(args.out, result[0])
    return {"cpu_ms": cpu * 1e3 / args.reps, "wall_ms": wall * 1e3 / args.reps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("quantize")
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p = sub.add_parser("llama")
    p.add_argument("gguf", type=Path)
    p.add_argument("--contexts", default="64")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--kv", choices=("f16", "f32"), default="f16")
    p = sub.add_parser("export-cnn")
    p.add_argument("weights", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--size", type=int, default=224)
    p = sub.add_parser("export-encoder")
    p.add_argument("weights", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--eps", type=float, required=True)
    p.add_argument("--inputs", type=Path, required=True)
    p = sub.add_parser("ort")
    p.add_argument("model", type=Path)
    p.add_argument("inputs", type=Path)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    run = {"quantize": _quantize, "llama": _llama, "export-cnn": _export_cnn,
           "export-encoder": _export_encoder, "ort": _ort}[args.cmd]  # fmt: skip
    print(json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
