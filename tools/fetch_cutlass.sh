#!/usr/bin/env bash
# Installs the CUTLASS headers the CUDA prefill kernels need (src/cuda/grouped_sm90_*.cu) from
# PyPI's nvidia-cutlass wheel into .deps/cutlass-<version>/ (git-ignored; never committed).
# Idempotent; prints the directory. Called by tools/setup.sh when nvcc is present.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${QMOE_CUTLASS_VERSION:-4.2.0.0}"
dest=".deps/cutlass-${version}"
if [[ -f "${dest}/include/cutlass/cutlass.h" && -f "${dest}/tools/util/include/cutlass/util/packed_stride.hpp" ]]; then
  echo "${dest}"
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  sudo_cmd=""
  if [[ $(id -u) != 0 ]]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: "nvidia-cutlass==${version}" -d "${tmp}" >&2
wheel="$(ls "${tmp}"/nvidia_cutlass-*.whl)"
# The wheel keeps CUTLASS's source tree under cutlass_library/source/: include/ and tools/util/include/.
python3 - "${wheel}" "${dest}" <<'PY'
import sys, zipfile, pathlib
wheel, dest = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = "cutlass_library/source/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if not name.startswith(prefix) or name.endswith("/"):
            continue
        rel = name[len(prefix):]
        if not (rel.startswith("include/") or rel.startswith("tools/util/include/")):
            continue
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(z.read(name))
PY
echo "${dest}"
