#!/usr/bin/env bash
# Unpacks binaries carried to the H200 xz-compressed (qmoe, qmoe_cuda_tests, libfmt.so.9 built on
# the Debian build machine), for the device-call scripts under bench/runs/:
#   tools/gpu_unpack.sh DIR...
# DIR holds either single files (qmoe.xz, ...) or packs.tar.xz: several builds in one archive
# (folders BUILD/qmoe, BUILD/qmoe_cuda_tests, BUILD/libfmt.so.9), which xz with a dictionary larger
# than one binary (tools/gpu_pack.sh) compresses to little more than one build, since builds of
# neighbouring commits share most of their bytes; the carried tree is limited to 64 MiB.
set -u
for d in "$@"; do
  if [[ -e $d/packs.tar.xz ]]; then
    tar xJf "$d/packs.tar.xz" -C "$d" && rm "$d/packs.tar.xz"
    for b in "$d"/*/qmoe "$d"/*/qmoe_cuda_tests; do [[ -e $b ]] && chmod +x "$b"; done
  fi
  for f in "$d"/*.xz; do [[ -e $f ]] && xz -d "$f"; done
  for b in "$d"/qmoe "$d"/qmoe_cuda_tests; do [[ -e $b ]] && chmod +x "$b"; done
done
exit 0
