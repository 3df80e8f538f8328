#!/usr/bin/env bash
# Unpacks binaries carried to the H200 xz-compressed (qmoe, qmoe_cuda_tests, libfmt.so.9 built on
# the Debian build machine), for the device-call scripts under bench/runs/:
#   tools/gpu_unpack.sh DIR...
set -u
for d in "$@"; do
  for f in "$d"/*.xz; do [[ -e $f ]] && xz -d "$f"; done
  for b in "$d"/qmoe "$d"/qmoe_cuda_tests; do [[ -e $b ]] && chmod +x "$b"; done
done
exit 0
