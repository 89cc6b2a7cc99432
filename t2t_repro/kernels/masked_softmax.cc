// Attention weights from logits [batch, heads, queries, keys] as two CPU
// kernels (forward, backward), one row of keys at a time, float32
// arithmetic: the same function as the TensorFlow ops of
// t2t_repro/layers/scaled_dot_product_attention.py,
//   w = softmax(where(mask, z / depth_sqrt, -1e9)) * mask,
// and its gradient, mask * w * (dw - sum(dw * w)) / depth_sqrt, with w
// recomputed from the logits (float32) rather than read back rounded to
// the logits' dtype. Those ops are about ten passes over the logits each
// way (casts, scale, select, softmax's max/exp/sum/divide, the mask
// multiply); a row of keys fits in cache, so each kernel makes one.
// The mask is boolean and broadcast like the TensorFlow ops': each of its
// first three axes is 1 or the logits'. A row with no allowed key gets
// zero weights (and zero gradient), as there.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "row_kernels.h"

namespace t2t_repro {
namespace {

using Row = Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>;

// t2t_repro/layers/masks.py's NEG_INF: exp() of it underflows to 0.
constexpr float kMaskedLogit = -1e9f;

// Where the mask row of each logits row starts.
struct MaskRows {
  const bool* data;
  int64_t heads, queries;          // the logits' axes 1 and 2
  int64_t batch_stride, head_stride, query_stride;

  const bool* Row(int64_t row) const {
    const int64_t query = row % queries;
    const int64_t head = (row / queries) % heads;
    const int64_t batch = row / (queries * heads);
    return data + batch * batch_stride + head * head_stride +
           query * query_stride;
  }
};

// Checks logits [B, H, Q, K], a mask broadcastable to them and a scalar
// depth_sqrt; sets the mask's row layout.
void CheckInputs(OpKernelContext* context, const Tensor& logits,
                 const Tensor& mask, const Tensor& depth_sqrt,
                 MaskRows* rows) {
  OP_REQUIRES(context, logits.dims() == 4 && mask.dims() == 4,
              InvalidArgument(
                  "logits and mask must be [batch, heads, queries, keys], got ",
                  logits.shape().DebugString(), " and ",
                  mask.shape().DebugString()));
  for (int axis = 0; axis < 4; ++axis) {
    const int64_t size = mask.dim_size(axis);
    OP_REQUIRES(context,
                size == logits.dim_size(axis) || (axis < 3 && size == 1),
                InvalidArgument(
                    "a mask of shape ", mask.shape().DebugString(),
                    " does not broadcast to logits of shape ",
                    logits.shape().DebugString()));
  }
  OP_REQUIRES(context,
              tensorflow::TensorShapeUtils::IsScalar(depth_sqrt.shape()),
              InvalidArgument("depth_sqrt must be a scalar"));
  const int64_t keys = logits.dim_size(3);
  rows->data = mask.flat<bool>().data();
  rows->heads = logits.dim_size(1);
  rows->queries = logits.dim_size(2);
  rows->query_stride = mask.dim_size(2) == 1 ? 0 : keys;
  rows->head_stride = mask.dim_size(1) == 1 ? 0 : mask.dim_size(2) * keys;
  rows->batch_stride =
      mask.dim_size(0) == 1 ? 0 : mask.dim_size(1) * mask.dim_size(2) * keys;
}

// The weights of one row, in place: row holds the logits on entry. False
// if no key is allowed (row is then all zeros).
bool Softmax(const bool* allowed, float depth_sqrt, float* row, int64_t keys) {
  bool any = false;
  for (int64_t j = 0; j < keys; ++j) {
    any |= allowed[j];
    row[j] = allowed[j] ? row[j] / depth_sqrt : kMaskedLogit;
  }
  if (!any) {
    std::fill(row, row + keys, 0.f);
    return false;
  }
  Row weights(row, keys);
  weights = (weights - weights.maxCoeff()).exp();
  weights /= weights.sum();
  // Multiplied, as the TensorFlow ops: a NaN row stays NaN everywhere.
  for (int64_t j = 0; j < keys; ++j) row[j] *= static_cast<float>(allowed[j]);
  return true;
}

template <typename T>
class MaskedSoftmaxOp : public OpKernel {
 public:
  explicit MaskedSoftmaxOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& logits = context->input(0);
    MaskRows mask;
    CheckInputs(context, logits, context->input(1), context->input(2), &mask);
    if (!context->status().ok()) return;
    const float depth_sqrt = context->input(2).scalar<float>()();
    Tensor* weights;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, logits.shape(), &weights));
    const int64_t keys = logits.dim_size(3);
    const int64_t rows = keys ? logits.NumElements() / keys : 0;
    if (rows == 0) return;
    const T* z = logits.flat<T>().data();
    T* w = weights->flat<T>().data();

    ForEachBlock(context, rows, 12 * keys, [&](int64_t begin, int64_t end) {
      AlignedFloats buffer(keys);
      for (int64_t i = begin; i < end; ++i) {
        ToFloat(z + i * keys, buffer.data(), keys);
        Softmax(mask.Row(i), depth_sqrt, buffer.data(), keys);
        FromFloat(buffer.data(), w + i * keys, keys);
      }
    });
  }
};

template <typename T>
class MaskedSoftmaxGradOp : public OpKernel {
 public:
  explicit MaskedSoftmaxGradOp(OpKernelConstruction* context)
      : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dweights = context->input(0);
    const Tensor& logits = context->input(1);
    MaskRows mask;
    CheckInputs(context, logits, context->input(2), context->input(3), &mask);
    if (!context->status().ok()) return;
    OP_REQUIRES(context, dweights.shape() == logits.shape(),
                InvalidArgument(
                    "dweights and logits differ in shape"));
    const float depth_sqrt = context->input(3).scalar<float>()();
    Tensor* dlogits;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, logits.shape(), &dlogits));
    const int64_t keys = logits.dim_size(3);
    const int64_t rows = keys ? logits.NumElements() / keys : 0;
    if (rows == 0) return;
    const T* dw = dweights.flat<T>().data();
    const T* z = logits.flat<T>().data();
    T* dz = dlogits->flat<T>().data();

    ForEachBlock(context, rows, 16 * keys, [&](int64_t begin, int64_t end) {
      const float scale = depth_sqrt;  // a local: stores to g cannot alias it
      AlignedFloats buffer(2 * keys);
      float* w = buffer.data();
      float* g = w + keys;
      for (int64_t i = begin; i < end; ++i) {
        ToFloat(z + i * keys, w, keys);
        const bool* allowed = mask.Row(i);
        if (!Softmax(allowed, scale, w, keys)) {
          FromFloat(w, dz + i * keys, keys);  // zeros
          continue;
        }
        ToFloat(dw + i * keys, g, keys);
        float dot = 0.f;
        // As the TensorFlow ops: dweights times the mask (a NaN at a
        // masked key reaches the whole row, so the step is skipped), and
        // the select's gradient exactly 0 at masked keys.
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < keys; ++j) {
          g[j] *= static_cast<float>(allowed[j]);
          dot += g[j] * w[j];
        }
#pragma omp simd
        for (int64_t j = 0; j < keys; ++j)
          g[j] = allowed[j] ? w[j] * (g[j] - dot) / scale : 0.f;
        FromFloat(g, dz + i * keys, keys);
      }
    });
  }
};

}  // namespace

REGISTER_OP("T2tMaskedSoftmax")
    .Input("logits: T")
    .Input("mask: bool")
    .Input("depth_sqrt: float")
    .Output("weights: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn(ShapeOfInput(0));

REGISTER_OP("T2tMaskedSoftmaxGrad")
    .Input("dweights: T")
    .Input("logits: T")
    .Input("mask: bool")
    .Input("depth_sqrt: float")
    .Output("dlogits: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn(ShapeOfInput(1));

T2T_REGISTER_FLOAT_KERNELS("T2tMaskedSoftmax", MaskedSoftmaxOp);
T2T_REGISTER_FLOAT_KERNELS("T2tMaskedSoftmaxGrad", MaskedSoftmaxGradOp);

}  // namespace t2t_repro
