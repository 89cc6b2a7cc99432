// What the row-by-row kernels of this directory share: TensorFlow's
// names, float32 copies of a row in and out of float32 or bfloat16
// tensors, and a split of rows over TensorFlow's intra-op threads.

#ifndef T2T_REPRO_KERNELS_ROW_KERNELS_H_
#define T2T_REPRO_KERNELS_ROW_KERNELS_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

namespace t2t_repro {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// Scratch rows at a fixed (64-byte) alignment: vectorised loops peel
// elements up to an aligned address and reduce in an order that depends
// on it, so buffers wherever malloc puts them would make two identical
// steps differ in the last bits.
using AlignedFloats = std::vector<float, Eigen::aligned_allocator<float>>;

// bfloat16 is the top half of a float32: widening is a shift; narrowing
// rounds to nearest even, as Eigen's conversion does (NaN stays NaN).
inline void ToFloat(const float* in, float* out, int64_t n) {
  std::memcpy(out, in, n * sizeof(float));
}
inline void ToFloat(const tensorflow::bfloat16* in, float* out, int64_t n) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(in);
  uint32_t* wide = reinterpret_cast<uint32_t*>(out);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) wide[i] = static_cast<uint32_t>(bits[i]) << 16;
}
inline void FromFloat(const float* in, float* out, int64_t n) {
  std::memcpy(out, in, n * sizeof(float));
}
inline void FromFloat(const float* in, tensorflow::bfloat16* out, int64_t n) {
  const uint32_t* wide = reinterpret_cast<const uint32_t*>(in);
  uint16_t* bits = reinterpret_cast<uint16_t*>(out);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t w = wide[i];
    const bool nan = (w & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = w + 0x7fffu + ((w >> 16) & 1u);
    bits[i] = nan ? static_cast<uint16_t>((w >> 16) | 0x40u)
                  : static_cast<uint16_t>(rounded >> 16);
  }
}

// Calls work(begin, end) on ranges of [0, rows) on the intra-op threads.
inline void ForEachBlock(tensorflow::OpKernelContext* context, int64_t rows,
                         int64_t cost_per_row,
                         const std::function<void(int64_t, int64_t)>& work) {
  context->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
      rows, tsl::thread::ThreadPool::SchedulingParams::Adaptive(cost_per_row),
      work);
}

// An InvalidArgument status whose message is `pieces` concatenated.
template <typename... Pieces>
absl::Status InvalidArgument(const Pieces&... pieces) {
  return absl::InvalidArgumentError(absl::StrCat(pieces...));
}

// A shape function: output 0 has the shape of input `index`.
inline std::function<absl::Status(InferenceContext*)> ShapeOfInput(int index) {
  return [index](InferenceContext* c) {
    c->set_output(0, c->input(index));
    return absl::OkStatus();
  };
}

}  // namespace t2t_repro

// Registers the CPU kernel template Kernel<T> of op `name` for both of the
// kernels' dtypes.
#define T2T_REGISTER_FLOAT_KERNELS(name, Kernel)                       \
  REGISTER_KERNEL_BUILDER(                                              \
      Name(name).Device(DEVICE_CPU).TypeConstraint<float>("T"),         \
      Kernel<float>);                                                   \
  REGISTER_KERNEL_BUILDER(Name(name)                                    \
                              .Device(DEVICE_CPU)                       \
                              .TypeConstraint<::tensorflow::bfloat16>("T"), \
                          Kernel<::tensorflow::bfloat16>)

#endif  // T2T_REPRO_KERNELS_ROW_KERNELS_H_
