// Label-smoothed cross-entropy of logits [..., vocab] against int32 labels
// [...], as two CPU kernels (forward, backward), one row of logits at a
// time, float32 arithmetic: the same function as
// t2t_repro/training/losses.py's XLA-compiled `_per_token_loss_and_hit`,
//   loss = logsumexp(z) - (1 - eps) z_label - eps mean(z),
//   hit  = argmax(z) == label (the first maximum, as tf.argmax),
// and its gradient, dloss * (softmax(z) - (1 - eps) onehot(label) - eps / V).
// Rows whose upstream gradient is 0 (padding) are written as zeros without
// computing their softmax. Exponentials are Eigen's vectorised ones.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "row_kernels.h"

namespace t2t_repro {
namespace {

using Row = Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>;

// Checks logits [..., V] against labels [...] and a scalar smoothing; sets
// rows and vocab.
void CheckShapes(OpKernelContext* context, const Tensor& logits,
                 const Tensor& labels, const Tensor& smoothing, int64_t* rows,
                 int64_t* vocab) {
  OP_REQUIRES(context, logits.dims() >= 1 && logits.dim_size(logits.dims() - 1) > 0,
              InvalidArgument(
                  "logits need a non-empty vocabulary axis"));
  tensorflow::TensorShape rows_shape = logits.shape();
  rows_shape.RemoveLastDims(1);
  OP_REQUIRES(context, labels.shape() == rows_shape,
              InvalidArgument(
                  "labels of shape ", labels.shape().DebugString(),
                  " for logits of shape ", logits.shape().DebugString()));
  OP_REQUIRES(context, tensorflow::TensorShapeUtils::IsScalar(smoothing.shape()),
              InvalidArgument("smoothing must be a scalar"));
  *vocab = logits.dim_size(logits.dims() - 1);
  *rows = labels.NumElements();
}

void CheckLabels(OpKernelContext* context, const int32_t* labels,
                 int64_t rows, int64_t vocab) {
  for (int64_t i = 0; i < rows; ++i) {
    OP_REQUIRES(context, labels[i] >= 0 && labels[i] < vocab,
                InvalidArgument(
                    "label ", labels[i], " at row ", i,
                    " is outside the vocabulary [0, ", vocab, ")"));
  }
}

template <typename T>
class SmoothedCrossEntropyOp : public OpKernel {
 public:
  explicit SmoothedCrossEntropyOp(OpKernelConstruction* context)
      : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& logits = context->input(0);
    const Tensor& labels = context->input(1);
    int64_t rows, vocab;
    CheckShapes(context, logits, labels, context->input(2), &rows, &vocab);
    if (!context->status().ok()) return;
    const float smoothing = context->input(2).scalar<float>()();
    const int32_t* label = labels.flat<int32_t>().data();
    CheckLabels(context, label, rows, vocab);
    if (!context->status().ok()) return;
    Tensor *loss, *hit, *log_partition;
    OP_REQUIRES_OK(context, context->allocate_output(0, labels.shape(), &loss));
    OP_REQUIRES_OK(context, context->allocate_output(1, labels.shape(), &hit));
    OP_REQUIRES_OK(context,
                   context->allocate_output(2, labels.shape(), &log_partition));
    const T* z = logits.flat<T>().data();
    float* loss_data = loss->flat<float>().data();
    bool* hit_data = hit->flat<bool>().data();
    float* log_partition_data = log_partition->flat<float>().data();

    ForEachBlock(context, rows, 6 * vocab, [&](int64_t begin, int64_t end) {
      AlignedFloats buffer(vocab);
      Row row(buffer.data(), vocab);
      for (int64_t i = begin; i < end; ++i) {
        ToFloat(z + i * vocab, buffer.data(), vocab);
        Eigen::Index argmax;
        const float top = row.maxCoeff(&argmax);
        const float lse = top + std::log((row - top).exp().sum());
        loss_data[i] = lse - (1.f - smoothing) * buffer[label[i]] -
                       smoothing * row.mean();
        hit_data[i] = argmax == label[i];
        log_partition_data[i] = lse;
      }
    });
  }
};

template <typename T>
class SmoothedCrossEntropyGradOp : public OpKernel {
 public:
  explicit SmoothedCrossEntropyGradOp(OpKernelConstruction* context)
      : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dloss = context->input(0);
    const Tensor& logits = context->input(1);
    const Tensor& labels = context->input(2);
    const Tensor& log_partition = context->input(3);
    int64_t rows, vocab;
    CheckShapes(context, logits, labels, context->input(4), &rows, &vocab);
    if (!context->status().ok()) return;
    const float smoothing = context->input(4).scalar<float>()();
    OP_REQUIRES(context,
                dloss.shape() == labels.shape() &&
                    log_partition.shape() == labels.shape(),
                InvalidArgument(
                    "dloss and log_partition must have the labels' shape"));
    const int32_t* label = labels.flat<int32_t>().data();
    CheckLabels(context, label, rows, vocab);
    if (!context->status().ok()) return;
    Tensor* dlogits;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, logits.shape(), &dlogits));
    const T* z = logits.flat<T>().data();
    const float* upstream = dloss.flat<float>().data();
    const float* lse = log_partition.flat<float>().data();
    T* out = dlogits->flat<T>().data();
    const float uniform = smoothing / vocab;

    ForEachBlock(context, rows, 6 * vocab, [&](int64_t begin, int64_t end) {
      AlignedFloats buffer(vocab);
      Row row(buffer.data(), vocab);
      for (int64_t i = begin; i < end; ++i) {
        const float g = upstream[i];
        if (g == 0.f) {
          row.setZero();
        } else {
          ToFloat(z + i * vocab, buffer.data(), vocab);
          row = g * ((row - lse[i]).exp() - uniform);
          buffer[label[i]] -= g * (1.f - smoothing);
        }
        FromFloat(buffer.data(), out + i * vocab, vocab);
      }
    });
  }
};

}  // namespace

REGISTER_OP("T2tSmoothedCrossEntropy")
    .Input("logits: T")
    .Input("labels: int32")
    .Input("smoothing: float")
    .Output("loss: float")
    .Output("hit: bool")
    .Output("log_partition: float")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->input(1));
      return absl::OkStatus();
    });

REGISTER_OP("T2tSmoothedCrossEntropyGrad")
    .Input("dloss: float")
    .Input("logits: T")
    .Input("labels: int32")
    .Input("log_partition: float")
    .Input("smoothing: float")
    .Output("dlogits: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn(ShapeOfInput(1));

T2T_REGISTER_FLOAT_KERNELS("T2tSmoothedCrossEntropy", SmoothedCrossEntropyOp);
T2T_REGISTER_FLOAT_KERNELS("T2tSmoothedCrossEntropyGrad", SmoothedCrossEntropyGradOp);

}  // namespace t2t_repro
