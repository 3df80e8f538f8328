#!/usr/bin/env bash
# For the next session (not run), one call with carry [".gpu/y"]: main at the thirty-second
# session's end (.gpu/y; rebuild and repack it if .gpu/ did not survive). The
# whole suite and memcheck (~430 s): the suite ran on `f13f5ca` less one test fix (56 of 57, the
# failure an assertion the fix moved; that test passed on `c962e8f`), and the register kernel's
# 192-row tile ran only its kernel tests, not PrefillKernels.EveryTileMatchesTheCpuBackend (which
# now covers it through the layer); since then its instances take 232 registers (setmaxnreg, as the
# 256-row ones), the f16 models' test runs the f16 wide tile (540 tokens), and the swapped GEMM's
# host-side setup was folded into GroupedGemm (identical SASS): none of it run yet.
exec bash bench/runs/2026-12-01_session32/suite.sh .gpu/y
