#!/usr/bin/env bash
# The GPU-node check, on the machine the parts were carried to: join and verify the parts, unpack them, make the
# stub's venv (NumPy 1 and tokenizers; onnxruntime-gpu on a GPU), then run gpu_node_check.py in it.
# usage: gpu_node_check.sh PARTS_DIR OUT [--cpu] [--quick]     (PYTHON: the Python to use, default python3)
# PARTS_DIR holds carry.tar.xz.part-NN and MANIFEST.json from scripts/gpu_node_pack.py; OUT gets gpu_node.{json,md}.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: gpu_node_check.sh PARTS_DIR OUT [--cpu] [--quick]" >&2; exit 2; }
PARTS=$(cd "$1" && pwd); OUT=$2; shift 2
PY=${PYTHON:-python3}
CPU=0; for arg in "$@"; do [ "$arg" = --cpu ] && CPU=1; done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-node-check.XXXXXX"); trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

expected=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["sha256"])' "$PARTS/MANIFEST.json")
parts=$("$PY" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["parts"]))' "$PARTS/MANIFEST.json")
for part in $parts; do
	[ -f "$PARTS/$part" ] || { echo "gpu_node_check.sh: part $part is missing from $PARTS: carry every part" >&2; exit 1; }
	cat "$PARTS/$part"
done > "$WORK/carry.tar.xz"
actual=$(sha256sum "$WORK/carry.tar.xz" | cut -d' ' -f1)
[ "$actual" = "$expected" ] || { echo "gpu_node_check.sh: the joined parts do not match MANIFEST.json (a part is damaged or from another pack)" >&2; exit 1; }
# Python's own lzma, since a bare node may lack the xz program.
"$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], filter="tar")' "$WORK/carry.tar.xz" "$WORK"
rm "$WORK/carry.tar.xz"
CARRY=$WORK/carry

# The stub's venv: this Python's packages behind its own (a .pth after its site-packages), NumPy 1 and tokenizers in
# front where this Python lacks them (pytriton 0.7.0's stub misreads every input with NumPy 2).
# pip is the node Python's own (--target): a venv made without ensurepip needs none of its own.
"$PY" -m venv --without-pip "$WORK/venv"
VPY=$WORK/venv/bin/python
VSITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$VSITE/zz_node_site.pth"
WHEELS=$CARRY/wheels/cp$("$VPY" -c 'import sys; print(f"{sys.version_info.major}{sys.version_info.minor}")')
if ! "$VPY" -c 'import sys, numpy, tokenizers; sys.exit(int(numpy.__version__.split(".")[0]) >= 2)' 2>/dev/null; then
	"$PY" -m pip install --quiet --no-index --no-deps --target "$VSITE" "$WHEELS"/numpy-*.whl "$WHEELS"/tokenizers-*.whl
fi
if [ "$CPU" = 0 ]; then
	"$PY" -m pip install --quiet --no-index --no-deps --target "$VSITE" "$WHEELS"/onnxruntime_gpu-*.whl
fi
export NODE_PYTHON
NODE_PYTHON=$(command -v "$PY")
"$VPY" "$CARRY/gpu_node_check.py" --carry "$CARRY" --out "$OUT" "$@"
