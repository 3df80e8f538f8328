#!/usr/bin/env bash
# Packs several CUDA builds into one archive for a device call (unpacked by tools/gpu_unpack.sh):
#   tools/gpu_pack.sh OUT_DIR NAME=BUILD_DIR[:tests] ...
# Each NAME gets BUILD_DIR/qmoe (and with :tests BUILD_DIR/tests/qmoe_cuda_tests), stripped, and
# the libfmt.so.9 it links. The archive is ordered so that like binaries sit next to each other and
# xz's 384 MiB dictionary spans them: four builds of neighbouring commits take ~16 MB, one ~9 MB.
set -euo pipefail
out=$1; shift
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cli=(); tests=(); libs=()
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; dir=${rest%%:*}
  mkdir -p "$stage/$name"
  strip -o "$stage/$name/qmoe" "$dir/qmoe"; cli+=("$name/qmoe")
  if [[ $rest == *:tests ]]; then
    strip -o "$stage/$name/qmoe_cuda_tests" "$dir/tests/qmoe_cuda_tests"; tests+=("$name/qmoe_cuda_tests")
  fi
  cp -L "$(ldd "$dir/qmoe" | awk '/libfmt/ {print $3}')" "$stage/$name/libfmt.so.9"; libs+=("$name/libfmt.so.9")
done
mkdir -p "$out"
tar cf - -C "$stage" "${cli[@]}" "${tests[@]}" "${libs[@]}" | xz -T1 --lzma2=preset=6,dict=384MiB > "$out/packs.tar.xz"
ls -l "$out/packs.tar.xz"
