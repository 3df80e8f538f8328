#!/usr/bin/env bash
# Installs what qmoe needs to build and test on Debian 12 (idempotent; needs root or sudo).
# Only Debian packages: no third-party source is fetched or vendored.
set -euo pipefail

packages=(cmake ninja-build g++ ccache nlohmann-json3-dev libcli11-dev libfmt-dev googletest libgtest-dev
          libgmock-dev libbenchmark-dev)
if [[ "${QMOE_WITH_FUZZERS:-0}" == 1 ]]; then packages+=(clang libclang-rt-14-dev); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  if [[ $(id -u) != 0 ]]; then sudo_cmd="sudo"; fi
  echo "qmoe setup: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA backend's prefill kernels need CUTLASS headers (PyPI's nvidia-cutlass wheel).
if [[ "${QMOE_CUDA:-AUTO}" != OFF ]] && { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  "$(dirname "$0")/fetch_cutlass.sh" >/dev/null
fi
