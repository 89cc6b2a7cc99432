// LayerNorm over the last axis as two CPU kernels (forward, backward), each
// one pass over its rows: the same float32 arithmetic as
// t2t_repro/layers/layer_normalization.py's TensorFlow ops, which read and
// write the activations once per op (about a dozen ops each way). Blocks
// of rows are spread over TensorFlow's intra-op threads; bfloat16
// activations are widened to float32 per row, so statistics and sums are
// float32. The blocks depend on the row count only and their partial
// weight gradients are added in block order, so results do not depend on
// the thread count or on scheduling.
//
// Built on first use by t2t_repro/kernels/__init__.py against the installed
// TensorFlow's headers.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "row_kernels.h"

namespace t2t_repro {
namespace {

// Rows per task handed to the thread pool; each task owns one scratch row
// (and, backward, one partial sum of the weight gradients).
constexpr int64_t kBlockRows = 32;

int64_t NumTasks(int64_t rows) { return (rows + kBlockRows - 1) / kBlockRows; }

void ForEachTask(OpKernelContext* context, int64_t tasks, int64_t cost,
                 const std::function<void(int64_t)>& work) {
  ForEachBlock(context, tasks, cost, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) work(task);
  });
}

absl::Status LastAxisShape(InferenceContext* c) {
  ShapeHandle x;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &x));
  ShapeHandle rows;
  TF_RETURN_IF_ERROR(c->Subshape(x, 0, -1, &rows));
  c->set_output(0, x);
  c->set_output(1, rows);
  c->set_output(2, rows);
  return absl::OkStatus();
}

template <typename T>
class LayerNormOp : public OpKernel {
 public:
  explicit LayerNormOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& gamma = context->input(1);
    const Tensor& beta = context->input(2);
    OP_REQUIRES(context, x.dims() >= 1,
                InvalidArgument("x must have a last axis"));
    const int64_t width = x.dim_size(x.dims() - 1);
    OP_REQUIRES(context,
                gamma.NumElements() == width && beta.NumElements() == width,
                InvalidArgument(
                    "gamma and beta must have x's last dimension, ", width));
    TensorShape rows_shape = x.shape();
    rows_shape.RemoveLastDims(1);
    Tensor *y, *mean, *rstd;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(context, context->allocate_output(1, rows_shape, &mean));
    OP_REQUIRES_OK(context, context->allocate_output(2, rows_shape, &rstd));
    const int64_t rows = rows_shape.num_elements();
    if (width == 0) {  // the statistics of an empty row, as NumPy's
      mean->flat<float>().setConstant(std::numeric_limits<float>::quiet_NaN());
      rstd->flat<float>().setConstant(std::numeric_limits<float>::quiet_NaN());
    }
    if (rows == 0 || width == 0) return;

    const T* x_data = x.flat<T>().data();
    const float* g = gamma.flat<float>().data();
    const float* b = beta.flat<float>().data();
    T* y_data = y->flat<T>().data();
    float* mean_data = mean->flat<float>().data();
    float* rstd_data = rstd->flat<float>().data();
    const float epsilon = epsilon_;
    const int64_t tasks = NumTasks(rows);

    ForEachTask(context, tasks, 8 * width * kBlockRows, [&](int64_t task) {
      AlignedFloats row(width);
      float* r = row.data();
      const int64_t end = std::min(rows, (task + 1) * kBlockRows);
      for (int64_t i = task * kBlockRows; i < end; ++i) {
        ToFloat(x_data + i * width, r, width);
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < width; ++j) sum += r[j];
        const float mu = sum / width;
        float squares = 0.f;
#pragma omp simd reduction(+ : squares)
        for (int64_t j = 0; j < width; ++j) {
          const float d = r[j] - mu;
          squares += d * d;
        }
        const float s = 1.f / std::sqrt(squares / width + epsilon);
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) r[j] = (r[j] - mu) * s * g[j] + b[j];
        FromFloat(r, y_data + i * width, width);
        mean_data[i] = mu;
        rstd_data[i] = s;
      }
    });
  }

 private:
  float epsilon_;
};

template <typename T>
class LayerNormGradOp : public OpKernel {
 public:
  explicit LayerNormGradOp(OpKernelConstruction* context)
      : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dy = context->input(0);
    const Tensor& x = context->input(1);
    const Tensor& gamma = context->input(2);
    const Tensor& mean = context->input(3);
    const Tensor& rstd = context->input(4);
    OP_REQUIRES(context, dy.shape() == x.shape(),
                InvalidArgument("dy and x differ in shape"));
    const int64_t width = x.dims() ? x.dim_size(x.dims() - 1) : 0;
    const int64_t rows = mean.NumElements();
    OP_REQUIRES(context,
                gamma.NumElements() == width && rstd.NumElements() == rows &&
                    rows * width == x.NumElements(),
                InvalidArgument(
                    "gamma, mean and rstd do not match x's shape"));
    Tensor *dx, *dgamma, *dbeta;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(context, context->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(context, context->allocate_output(2, gamma.shape(), &dbeta));
    float* dgamma_data = dgamma->flat<float>().data();
    float* dbeta_data = dbeta->flat<float>().data();
    std::fill(dgamma_data, dgamma_data + width, 0.f);
    std::fill(dbeta_data, dbeta_data + width, 0.f);
    if (rows == 0 || width == 0) return;

    const T* dy_data = dy.flat<T>().data();
    const T* x_data = x.flat<T>().data();
    const float* g = gamma.flat<float>().data();
    const float* mean_data = mean.flat<float>().data();
    const float* rstd_data = rstd.flat<float>().data();
    T* dx_data = dx->flat<T>().data();
    const int64_t tasks = NumTasks(rows);
    // Each task's sums of dy * x_hat and dy, added up after the tasks.
    std::vector<float> partial(2 * tasks * width, 0.f);

    ForEachTask(context, tasks, 12 * width * kBlockRows, [&](int64_t task) {
      AlignedFloats scratch(2 * width);
      float* d = scratch.data();
      float* h = d + width;
      float* dgamma_sum = partial.data() + 2 * task * width;
      float* dbeta_sum = dgamma_sum + width;
      const int64_t end = std::min(rows, (task + 1) * kBlockRows);
      for (int64_t i = task * kBlockRows; i < end; ++i) {
        ToFloat(dy_data + i * width, d, width);
        ToFloat(x_data + i * width, h, width);
        const float mu = mean_data[i];
        const float s = rstd_data[i];
        float g_sum = 0.f, gh_sum = 0.f;
#pragma omp simd reduction(+ : g_sum, gh_sum)
        for (int64_t j = 0; j < width; ++j) {
          const float x_hat = (h[j] - mu) * s;
          h[j] = x_hat;
          dgamma_sum[j] += d[j] * x_hat;
          dbeta_sum[j] += d[j];
          const float gj = d[j] * g[j];
          d[j] = gj;
          g_sum += gj;
          gh_sum += gj * x_hat;
        }
        const float g_mean = g_sum / width;
        const float gh_mean = gh_sum / width;
#pragma omp simd
        for (int64_t j = 0; j < width; ++j)
          d[j] = s * (d[j] - g_mean - h[j] * gh_mean);
        FromFloat(d, dx_data + i * width, width);
      }
    });
    for (int64_t task = 0; task < tasks; ++task) {
      const float* dgamma_sum = partial.data() + 2 * task * width;
      const float* dbeta_sum = dgamma_sum + width;
      for (int64_t j = 0; j < width; ++j) {
        dgamma_data[j] += dgamma_sum[j];
        dbeta_data[j] += dbeta_sum[j];
      }
    }
  }
};

}  // namespace

REGISTER_OP("T2tLayerNorm")
    .Input("x: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Output("y: T")
    .Output("mean: float")
    .Output("rstd: float")
    .Attr("T: {float, bfloat16}")
    .Attr("epsilon: float")
    .SetShapeFn(LastAxisShape);

REGISTER_OP("T2tLayerNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: float")
    .Input("mean: float")
    .Input("rstd: float")
    .Output("dx: T")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return absl::OkStatus();
    });

T2T_REGISTER_FLOAT_KERNELS("T2tLayerNorm", LayerNormOp);
T2T_REGISTER_FLOAT_KERNELS("T2tLayerNormGrad", LayerNormGradOp);

}  // namespace t2t_repro
