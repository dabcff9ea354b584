// What geglu.cc keeps for the tests (tests/worker/kernels/geglu_test.cc, tests/gpu/kernels/): the
// fused autograd function called directly, and the reference math (computed in fp32, fp64 for
// fp64 inputs, and returned in the input's dtype) that the CPU tests compare with autograd's
// gradient of the composition and the GPU tests compare the kernels with.
#pragma once

#include <torch/torch.h>

namespace adctl {

// The fused autograd functions themselves, on any device: the kernels on CUDA tensors of a
// build that has them, the reference math otherwise. (The dispatchers of geglu.h pick between
// these and the plain composition.)
torch::Tensor FusedGeglu(const torch::Tensor& h);

namespace fused_reference {

torch::Tensor GegluForward(const torch::Tensor& h);
torch::Tensor GegluBackward(const torch::Tensor& dout, const torch::Tensor& h);

}  // namespace fused_reference
}  // namespace adctl
