#include "config/gemm_plan.h"
#include "qmoe/synthetic.h"
#include "qmoe/moe.h"
#include <cstdio>
#include <cstdlib>
using namespace qmoe;
int main() {
  struct M { const char* n; int E, k; long hidden, inter; } models[] = {
      {"qwen3", 128, 8, 2048, 768}, {"mixtral", 8, 2, 4096, 14336}, {"dsv3", 256, 8, 7168, 2048},
      {"dsv3tp8", 256, 8, 7168, 256}, {"kimi", 384, 8, 7168, 256}, {"gptoss", 128, 4, 2880, 2880}};
  const char* schemes[] = {"w4a16_g128", "mxfp4", "nvfp4a16", "fp8_channel", "fp8_block", "w4a8_fp8", "bf16", "int8"};
  for (auto& mo : models)
    for (const char* s : schemes) {
      MoeLayer layer = synthetic_layer(s, {"small", 4, 2, 256, 128}, 3, 1);
      GemmLayout L = gemm_layout_of(layer.experts[0].w13, layer.round_weights_to_scale_dtype);
      bool ss = std::string(s) == "w4a8_fp8" || std::string(s) == "fp8_block";
      for (int t : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128})
        for (int proj = 0; proj < 2; ++proj) {
          GemmLayout P = L;
          P.rows = proj ? mo.hidden : 2 * mo.inter;
          P.cols = proj ? mo.inter : mo.hidden;
          setenv("QMOE_MMA_WAVE_BLOCKS", "3", 1);
          MmaLaunch a = plan_mma_launch(P, (long)t * mo.k, mo.E, 132, ss);
          unsetenv("QMOE_MMA_WAVE_BLOCKS");
          MmaLaunch b = plan_mma_launch(P, (long)t * mo.k, mo.E, 132, ss);
          if (a.k_splits != b.k_splits || a.row_blocks != b.row_blocks)
            printf("%s %s t=%d %s: ks %d->%d blocks %ld->%ld spp %d\n", mo.n, s, t, proj ? "w2" : "w13", a.k_splits, b.k_splits,
                   (long)a.row_blocks, (long)b.row_blocks, b.slots_per_pass);
        }
    }
}
