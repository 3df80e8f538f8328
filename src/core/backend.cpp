// Backend selection by name.
#include "qmoe/error.h"
#include "qmoe/moe.h"

namespace qmoe {
int cuda_device_count();
}

namespace qmoe {
namespace cpu {
std::unique_ptr<Backend> make_cpu_backend(int threads);
}
#if defined(QMOE_WITH_CUDA)
namespace cuda {
std::unique_ptr<Backend> make_cuda_backend(bool repacked_copy);
}
#else
int cuda_device_count() { return 0; }
#endif

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
  if (options.threads < 0 || options.threads > kMaxCpuThreads)
    throw Error("backend threads must be 0 (all cores) to " + std::to_string(kMaxCpuThreads) + ", got " +
                std::to_string(options.threads));
  if (name == "cpu") return cpu::make_cpu_backend(options.threads);
  if (name == "cuda") {
#if defined(QMOE_WITH_CUDA)
    if (cuda_device_count() == 0) throw NotSupported("backend 'cuda': no CUDA device is available");
    return cuda::make_cuda_backend(options.repacked_copy);
#else
    throw NotSupported("backend 'cuda' is not supported by this build (configure with QMOE_CUDA=ON and nvcc)");
#endif
  }
  throw Error("unknown backend '" + name + "' (expected cpu or cuda)");
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  BackendOptions options;
  options.threads = threads;
  return make_backend(name, options);
}

}  // namespace qmoe
