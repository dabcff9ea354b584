#include "worker/kernels/dispatch.h"

#include <atomic>
#include <cstdint>

#include "worker/kernels/dispatch_internal.h"

namespace adctl {

namespace {

std::atomic<bool> fused_enabled{true};

}  // namespace

torch::ScalarType ComputeType(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

#ifdef ADCTL_FUSED_CUDA
fused_cuda::DType KernelType(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return fused_cuda::DType::kFloat32;
    case torch::kBFloat16:
      return fused_cuda::DType::kBFloat16;
    case torch::kHalf:
      return fused_cuda::DType::kFloat16;
    default:
      TORCH_CHECK(false, "fused kernels: no kernel for dtype ", t.scalar_type());
  }
}

bool UseKernel(const torch::Tensor& x) {
  return x.is_cuda() && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16 ||
                         x.scalar_type() == torch::kHalf);
}

void Check(int error, const char* what) {
  TORCH_CHECK(error == 0, what, ": ", fused_cuda::FusedCudaErrorString(error));
}

const void* PtrOrNull(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

torch::Tensor KernelParam(const torch::Tensor& p, const torch::Tensor& x) {
  return p.defined() ? p.to(x.scalar_type()).contiguous() : p;
}
#else
bool UseKernel(const torch::Tensor&) { return false; }
#endif

torch::Tensor Aligned(const torch::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone();
}

torch::Tensor SameLayout(const torch::Tensor& t, const torch::Tensor& x) {
  if (t.strides() == x.strides()) return t;
  return torch::empty_like(x, t.options()).copy_(t);
}

bool IsChannelsLast(const torch::Tensor& x) {
  return x.dim() >= 3 && !x.is_contiguous() && x.movedim(1, -1).is_contiguous();
}

bool FusedKernelsBuilt() {
#ifdef ADCTL_FUSED_CUDA
  return true;
#else
  return false;
#endif
}

void SetFusedKernels(bool on) { fused_enabled.store(on); }
bool FusedKernelsEnabled() { return fused_enabled.load(); }

}  // namespace adctl
