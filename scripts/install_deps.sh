#!/usr/bin/env bash
# Installs what building and testing sieve needs on Debian 12, skipping what
# is already there: compilers and libraries from Debian's packages, the
# Python packages the reference tests use from PyPI.
set -euo pipefail

debs=(build-essential cmake ninja-build pkg-config git ca-certificates
      libpcre2-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
      libcpp-httplib-dev
      clang libclang-rt-14-dev
      chromium chromium-driver fonts-liberation
      python3 python3-pip iproute2)
missing=()
for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3/pip may come from elsewhere (pyenv); only ask apt for them when absent.
if command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
    missing=("${missing[@]/python3-pip/}")
    missing=("${missing[@]/python3/}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing Debian packages: ${missing[*]}" >&2
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >&2
fi

# Python packages for the independent reference (eval/reference) and the
# model tests (pinned to the versions the golden data was made with); openai and
# requests drive the HTTP server tests (tests/server); selenium drives
# Debian's chromium (through chromium-driver) in the chat page's browser test.
py_pkgs=("numpy" "gguf==0.19.0" "pytest" "openai" "requests" "selenium")
need_py=()
for spec in "${py_pkgs[@]}"; do
    mod="${spec%%=*}"
    python3 -c "import ${mod}" 2>/dev/null || need_py+=("$spec")
done
if [ ${#need_py[@]} -gt 0 ]; then
    echo "installing Python packages: ${need_py[*]}" >&2
    pip_flags=(--quiet --disable-pip-version-check)
    # Debian's own python3 refuses system-wide pip installs without this flag.
    python3 -m pip install --help 2>/dev/null | grep -q break-system-packages && pip_flags+=(--break-system-packages)
    python3 -m pip install "${pip_flags[@]}" "${need_py[@]}" >&2
fi
