// Checked CUDA runtime and NCCL calls, and the one RAII type the NCCL backend and the reducer
// need (a CUDA event). Only compiled with ADCTL_WITH_CUDA.
//
// ADCTL_CUDA_CHECK / ADCTL_NCCL_CHECK are for the training hot path (cf. llm.c's cudaCheck):
// on failure they print "file:line: call: error" and end the process at once with a documented
// exit code (common/worker_contract.h): a CUDA error is a crash (1), an NCCL error a communication
// failure (76, retryable). Nothing is unwound: a device in an unknown state is not worth it.
// NcclStatus turns a failed call into a Status, for rendezvous where errors are values.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/status.h"
#include "common/worker_contract.h"

namespace adctl::cuda {

[[noreturn]] inline void DieOnCudaError(cudaError_t error, const char* call, const char* file,
                                        int line) {
  std::fprintf(stderr, "%s:%d: %s: CUDA error %s (%s)\n", file, line, call, cudaGetErrorName(error),
               cudaGetErrorString(error));
  std::fflush(stderr);
  std::_Exit(kExitCrash);
}

[[noreturn]] inline void DieOnNcclError(ncclResult_t result, const char* call, const char* file,
                                        int line) {
  std::fprintf(stderr, "%s:%d: %s: NCCL error %d (%s)\n", file, line, call,
               static_cast<int>(result), ncclGetErrorString(result));
  std::fflush(stderr);
  std::_Exit(kExitTransient);
}

inline Status NcclStatus(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return Status::Ok();
  return Unavailable(std::string(file) + ":" + std::to_string(line) + ": " + call +
                     ": NCCL error " + std::to_string(static_cast<int>(result)) + " (" +
                     ncclGetErrorString(result) + ")");
}

// A CUDA event; timing off unless asked for. Not copyable.
class Event {
 public:
  explicit Event(bool timing = false) {
    if (cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming) !=
        cudaSuccess) {
      DieOnCudaError(cudaGetLastError(), "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
  }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace adctl::cuda

#define ADCTL_CUDA_CHECK(call)                                                     \
  do {                                                                             \
    const cudaError_t adctl_cuda_error_ = (call);                                  \
    if (adctl_cuda_error_ != cudaSuccess) {                                        \
      ::adctl::cuda::DieOnCudaError(adctl_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

#define ADCTL_NCCL_CHECK(call)                                                      \
  do {                                                                              \
    const ncclResult_t adctl_nccl_result_ = (call);                                 \
    if (adctl_nccl_result_ != ncclSuccess) {                                        \
      ::adctl::cuda::DieOnNcclError(adctl_nccl_result_, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

#define ADCTL_NCCL_STATUS(call) ::adctl::cuda::NcclStatus((call), #call, __FILE__, __LINE__)
