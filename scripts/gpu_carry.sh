#!/usr/bin/env bash
# What the default-scale notebooks need on an offline GPU machine whose python3 has torch, timm and transformers
# but no Jupyter stack and no data: papermill and the kernel it drives, and Fashion-MNIST.
#
#   scripts/gpu_carry.sh pack      here, with PyPI reachable: fills .gpucarry/wheels/ and .gpucarry/fashion-mnist/
#   scripts/gpu_carry.sh install   there, from the repository root: the wheels into /tmp/site, Fashion-MNIST into
#                                  data/system/ (where scripts/provision.sh puts it without root)
#
# then, there:  export PYTHONPATH=/tmp/site; PYTHON=python3 STEPS="7 8" scripts/gpu_check.sh
#
# The wheels are the versions of requirements-lock.txt for CPython $PYVER (default 3.12) on manylinux x86-64, less
# what that machine's image already holds (KEEP_THERE) and less jedi and debugpy, which IPython and ipykernel import
# only when present (completion and the debugger, neither used by papermill): 5 MB of wheels instead of 16.
# Fashion-MNIST travels as xz (26 MB instead of the Debian package's 30 MB gzip), so that the repository (about
# 31 MB), the wheels and the data stay under 64 MiB, for GPU machines that take the working tree with a size limit.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpucarry
PYVER=${PYVER:-3.12}
FMNIST_SRC=${LAYERSIM_FMNIST_SYSTEM:-/usr/share/datasets/fashion-mnist}
[ -d "$FMNIST_SRC" ] || FMNIST_SRC=data/system/usr/share/datasets/fashion-mnist
FMNIST_DST=data/system/usr/share/datasets/fashion-mnist
FILES="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
# Already on the GPU machines' image (its package list as read on 2026-11-17), or not needed: not carried.
KEEP_THERE="attrs certifi charset_normalizer click idna packaging psutil pygments pyyaml requests six tqdm
typing_extensions urllib3 python_dateutil jedi parso debugpy"

pack() {
    grep -qx "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >> .git/info/exclude
    rm -rf "$CARRY/wheels" "$CARRY/fashion-mnist"
    mkdir -p "$CARRY/wheels" "$CARRY/fashion-mnist"
    python3 -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -c requirements-lock.txt -d "$CARRY/wheels" papermill ipykernel
    for name in $KEEP_THERE; do rm -f "$CARRY/wheels/$name"-[0-9]*.whl; done
    for f in $FILES; do gzip -dc "$FMNIST_SRC/$f.gz" | xz -9 -T1 > "$CARRY/fashion-mnist/$f.xz"; done
    local tree; tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
    local carry; carry=$(du -cb "$CARRY/wheels" "$CARRY/fashion-mnist" | tail -1 | cut -f1)
    echo "wheels $(ls "$CARRY/wheels" | wc -l) files; repository $((tree >> 20)) MiB + carried $((carry >> 20)) MiB" \
        "= $(((tree + carry) >> 20)) MiB (keep it under 64; other untracked files count too)"
    echo "carry: [\"$CARRY/wheels\", \"$CARRY/fashion-mnist\"]"
}

install() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$CARRY"/wheels/*.whl
    mkdir -p "$FMNIST_DST"
    python3 - "$CARRY/fashion-mnist" "$FMNIST_DST" $FILES <<'EOF'
import gzip, lzma, shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for name in sys.argv[3:]:
    with lzma.open(src / f"{name}.xz") as fin, gzip.open(dst / f"{name}.gz", "wb", compresslevel=1) as fout:
        shutil.copyfileobj(fin, fout)
EOF
    PYTHONPATH=/tmp/site python3 -c "import papermill, ipykernel; print('papermill', papermill.__version__)"
}

case "${1:-}" in
    pack) pack ;;
    install) install ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
