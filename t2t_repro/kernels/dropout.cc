// Dropout as one CPU pass: y = x * (keep ? scale : 0), element by element,
// where keep compares 16 random bits with a threshold. The bits are the
// ones t2t_repro/layers/dropout.py draws with TensorFlow's ops (Philox
// 4x32-10 from the key and counter of StatelessRandomGetKeyCounter, each
// 32-bit draw split into two 16-bit halves, low half first), so the
// kernel keeps exactly the elements the TensorFlow ops keep; those ops
// write the bits, a slice of them, a comparison and a mask before the
// multiply. The backward pass is the same op applied to the upstream
// gradient: the mask is drawn again rather than stored.

#include <algorithm>
#include <cstdint>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "xla/tsl/lib/random/philox_random.h"
#include "row_kernels.h"

namespace t2t_repro {
namespace {

using Philox = ::tsl::random::PhiloxRandom;

// Elements decided by one Philox draw: 4 x 32 bits, 16 bits each.
constexpr int64_t kElementsPerDraw = 8;

template <typename T>
class DropoutOp : public OpKernel {
 public:
  explicit DropoutOp(OpKernelConstruction* context) : OpKernel(context) {
    int threshold;
    OP_REQUIRES_OK(context, context->GetAttr("threshold", &threshold));
    OP_REQUIRES(context, threshold > 0 && threshold < (1 << 16),
                tensorflow::errors::InvalidArgument(
                    "threshold must be in (0, 65536), got ", threshold));
    threshold_ = static_cast<uint32_t>(threshold);
    // As the TensorFlow ops: the scale rounded to T, the product too.
    const float scale = 65536.f / (65536.f - threshold);
    T rounded;
    FromFloat(&scale, &rounded, 1);
    ToFloat(&rounded, &scale_, 1);
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& key = context->input(1);
    const Tensor& counter = context->input(2);
    OP_REQUIRES(context, key.NumElements() == 1 && counter.NumElements() == 2,
                tensorflow::errors::InvalidArgument(
                    "key must have 1 element and counter 2, as "
                    "StatelessRandomGetKeyCounter's"));
    Tensor* y;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    const int64_t size = x.NumElements();
    if (size == 0) return;
    const uint64_t key_bits = key.flat<uint64_t>()(0);
    const uint64_t counter_lo = counter.flat<uint64_t>()(0);
    const uint64_t counter_hi = counter.flat<uint64_t>()(1);
    // As TensorFlow's stateless V2 kernels read the key and counter.
    Philox::ResultType counter_words;
    counter_words[0] = static_cast<uint32_t>(counter_lo);
    counter_words[1] = static_cast<uint32_t>(counter_lo >> 32);
    counter_words[2] = static_cast<uint32_t>(counter_hi);
    counter_words[3] = static_cast<uint32_t>(counter_hi >> 32);
    Philox::Key key_words;
    key_words[0] = static_cast<uint32_t>(key_bits);
    key_words[1] = static_cast<uint32_t>(key_bits >> 32);
    const Philox start(counter_words, key_words);
    const T* in = x.flat<T>().data();
    T* out = y->flat<T>().data();
    const uint32_t threshold = threshold_;
    const float scale = scale_;
    const int64_t draws = (size + kElementsPerDraw - 1) / kElementsPerDraw;

    ForEachBlock(context, draws, 20 * kElementsPerDraw,
                 [&](int64_t begin, int64_t end) {
      Philox generator = start;
      generator.Skip(begin);
      float values[kElementsPerDraw];
      float factors[kElementsPerDraw];
      for (int64_t draw = begin; draw < end; ++draw) {
        const Philox::ResultType bits = generator();
        const int64_t first = draw * kElementsPerDraw;
        const int64_t count = std::min(kElementsPerDraw, size - first);
        for (int64_t e = 0; e < kElementsPerDraw; ++e) {
          const uint32_t half = (bits[e / 2] >> (16 * (e % 2))) & 0xffffu;
          factors[e] = half >= threshold ? scale : 0.f;
        }
        ToFloat(in + first, values, count);
        for (int64_t e = 0; e < count; ++e) values[e] *= factors[e];
        FromFloat(values, out + first, count);
      }
    });
  }

 private:
  uint32_t threshold_;
  float scale_;
};

}  // namespace

REGISTER_OP("T2tDropout")
    .Input("x: T")
    .Input("key: uint64")
    .Input("counter: uint64")
    .Output("y: T")
    .Attr("T: {float, bfloat16}")
    .Attr("threshold: int")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return Status();
    });

#define T2T_REGISTER(T)                                               \
  REGISTER_KERNEL_BUILDER(                                            \
      Name("T2tDropout").Device(DEVICE_CPU).TypeConstraint<T>("T"),   \
      DropoutOp<T>);
T2T_REGISTER(float)
T2T_REGISTER(::tensorflow::bfloat16)
#undef T2T_REGISTER

}  // namespace t2t_repro
