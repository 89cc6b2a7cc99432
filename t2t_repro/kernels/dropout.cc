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
#include <cstring>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "row_kernels.h"

namespace t2t_repro {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "TensorFlow's bitcast of uint32 to uint16 is read low half first");

// One Philox draw is 4 x 32 bits: 8 elements of 16 bits. Draws are made
// kLanes at a time, one per SIMD lane (the scalar tsl::random::PhiloxRandom
// made the kernel slower than TensorFlow's ops).
constexpr int64_t kElementsPerDraw = 8;
constexpr int64_t kLanes = 16;
constexpr int64_t kElementsPerBlock = kElementsPerDraw * kLanes;

// Philox 4x32-10's constants (Salmon et al., 2011), as tsl's.
constexpr uint32_t kKeyStepA = 0x9E3779B9u;
constexpr uint32_t kKeyStepB = 0xBB67AE85u;
constexpr uint32_t kMultiplierA = 0xD2511F53u;
constexpr uint32_t kMultiplierB = 0xCD9E8D57u;

struct Stream {
  uint32_t counter[4];  // 128 bits, word 0 lowest
  uint32_t key[2];
};

// The kLanes draws numbered first, first + 1, ... of the stream: the
// counter plus the draw number (128-bit addition), ten rounds each.
void Draw(const Stream& stream, uint64_t first,
          uint32_t words[4][kLanes]) {
  for (int64_t lane = 0; lane < kLanes; ++lane) {
    const uint64_t skip = first + lane;
    const uint64_t low = (static_cast<uint64_t>(stream.counter[1]) << 32 |
                          stream.counter[0]);
    const uint64_t sum = low + skip;
    uint64_t high = static_cast<uint64_t>(stream.counter[3]) << 32 |
                    stream.counter[2];
    high += sum < low;
    words[0][lane] = static_cast<uint32_t>(sum);
    words[1][lane] = static_cast<uint32_t>(sum >> 32);
    words[2][lane] = static_cast<uint32_t>(high);
    words[3][lane] = static_cast<uint32_t>(high >> 32);
  }
  uint32_t key0 = stream.key[0], key1 = stream.key[1];
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const uint64_t product0 =
          static_cast<uint64_t>(kMultiplierA) * words[0][lane];
      const uint64_t product1 =
          static_cast<uint64_t>(kMultiplierB) * words[2][lane];
      const uint32_t next0 =
          static_cast<uint32_t>(product1 >> 32) ^ words[1][lane] ^ key0;
      const uint32_t next2 =
          static_cast<uint32_t>(product0 >> 32) ^ words[3][lane] ^ key1;
      words[1][lane] = static_cast<uint32_t>(product1);
      words[3][lane] = static_cast<uint32_t>(product0);
      words[0][lane] = next0;
      words[2][lane] = next2;
    }
    key0 += kKeyStepA;
    key1 += kKeyStepB;
  }
}

template <typename T>
class DropoutOp : public OpKernel {
 public:
  explicit DropoutOp(OpKernelConstruction* context) : OpKernel(context) {
    int threshold;
    OP_REQUIRES_OK(context, context->GetAttr("threshold", &threshold));
    OP_REQUIRES(context, threshold > 0 && threshold < (1 << 16),
                InvalidArgument(
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
                InvalidArgument(
                    "key must have 1 element and counter 2, as "
                    "StatelessRandomGetKeyCounter's"));
    Tensor* y;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    const int64_t size = x.NumElements();
    if (size == 0) return;
    // As TensorFlow's stateless V2 kernels read the key and counter.
    const uint64_t key_bits = key.flat<uint64_t>()(0);
    const uint64_t counter_low = counter.flat<uint64_t>()(0);
    const uint64_t counter_high = counter.flat<uint64_t>()(1);
    const Stream stream{
        {static_cast<uint32_t>(counter_low),
         static_cast<uint32_t>(counter_low >> 32),
         static_cast<uint32_t>(counter_high),
         static_cast<uint32_t>(counter_high >> 32)},
        {static_cast<uint32_t>(key_bits), static_cast<uint32_t>(key_bits >> 32)}};
    const T* in = x.flat<T>().data();
    T* out = y->flat<T>().data();
    const uint16_t threshold = static_cast<uint16_t>(threshold_);
    const float scale = scale_;
    const int64_t blocks = (size + kElementsPerBlock - 1) / kElementsPerBlock;

    ForEachBlock(context, blocks, 8 * kElementsPerBlock,
                 [&](int64_t begin, int64_t end) {
      const uint16_t limit = threshold;
      const float kept_scale = scale;
      alignas(64) uint32_t words[4][kLanes];
      alignas(64) uint32_t stream_words[4 * kLanes];
      alignas(64) uint16_t halves[kElementsPerBlock];
      alignas(64) float values[kElementsPerBlock];
      alignas(64) float factors[kElementsPerBlock];
      for (int64_t block = begin; block < end; ++block) {
        Draw(stream, block * kLanes, words);
        // The draws' words in stream order, then each word's low half
        // first: TensorFlow's uint32 output bitcast to uint16 on a
        // little-endian CPU.
        for (int64_t lane = 0; lane < kLanes; ++lane) {
          for (int word = 0; word < 4; ++word)
            stream_words[4 * lane + word] = words[word][lane];
        }
        std::memcpy(halves, stream_words, sizeof(halves));
        // Branch-free, on locals: a data-dependent branch per element
        // (30% taken at random) and a reload of the captured scale
        // through the closure kept this loop scalar and mispredicted.
#pragma omp simd
        for (int64_t e = 0; e < kElementsPerBlock; ++e)
          factors[e] = static_cast<float>(halves[e] >= limit) * kept_scale;
        const int64_t first = block * kElementsPerBlock;
        const int64_t count = std::min(kElementsPerBlock, size - first);
        ToFloat(in + first, values, count);
#pragma omp simd
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
    .SetShapeFn(ShapeOfInput(0));

T2T_REGISTER_FLOAT_KERNELS("T2tDropout", DropoutOp);

}  // namespace t2t_repro
