// PyTorch bindings for the legacy-gpt CUDA kernels (module name: legacy_gpt_kernels).
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>

cudaError_t launch_scaled_softmax(const float* x, float* y, int rows, int cols, float scale, float dropout_p,
                                  uint64_t seed, bool causal, int q_len, cudaStream_t stream);
cudaError_t launch_transpose(const float* in, float* out, int rows, int cols, cudaStream_t stream);
cudaError_t launch_rotary(float* x, const float* cos_t, const float* sin_t, const int* positions, int tokens,
                          int heads, int head_dim, cudaStream_t stream);

#define CHECK_INPUT(x)                                              \
  TORCH_CHECK((x).is_cuda(), #x " must be a CUDA tensor");          \
  TORCH_CHECK((x).is_contiguous(), #x " must be contiguous");       \
  TORCH_CHECK((x).scalar_type() == at::kFloat, #x " must be float32")

torch::Tensor scaled_softmax_forward(torch::Tensor x, double scale, double dropout_p, int64_t seed, bool causal,
                                     int64_t q_len) {
  CHECK_INPUT(x);
  const int64_t cols = x.size(-1);
  TORCH_CHECK(cols <= 1024, "scaled_softmax_forward: at most 1024 columns");
  auto y = torch::empty_like(x);
  const int64_t rows = x.numel() / cols;
  auto err = launch_scaled_softmax(x.data_ptr<float>(), y.data_ptr<float>(), static_cast<int>(rows),
                                   static_cast<int>(cols), static_cast<float>(scale),
                                   static_cast<float>(dropout_p), static_cast<uint64_t>(seed), causal,
                                   static_cast<int>(q_len), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "scaled_softmax_forward: ", cudaGetErrorString(err));
  return y;
}

torch::Tensor transpose_forward(torch::Tensor x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.dim() == 2, "transpose_forward: expected a 2-D tensor");
  auto out = torch::empty({x.size(1), x.size(0)}, x.options());
  auto err = launch_transpose(x.data_ptr<float>(), out.data_ptr<float>(), static_cast<int>(x.size(0)),
                              static_cast<int>(x.size(1)), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "transpose_forward: ", cudaGetErrorString(err));
  return out;
}

void rotary_forward_(torch::Tensor x, torch::Tensor cos_t, torch::Tensor sin_t, torch::Tensor positions) {
  CHECK_INPUT(x);
  CHECK_INPUT(cos_t);
  CHECK_INPUT(sin_t);
  TORCH_CHECK(x.dim() == 3, "rotary_forward_: expected (tokens, heads, head_dim)");
  const int64_t head_dim = x.size(2);
  TORCH_CHECK(head_dim == 32 || head_dim == 64 || head_dim == 128, "rotary_forward_: unsupported head_dim ",
              head_dim);
  TORCH_CHECK(x.size(1) * (head_dim / 2) <= 1024, "rotary_forward_: too many heads for one block");
  auto pos = positions.to(torch::kInt32).contiguous();
  auto err = launch_rotary(x.data_ptr<float>(), cos_t.data_ptr<float>(), sin_t.data_ptr<float>(),
                           pos.data_ptr<int>(), static_cast<int>(x.size(0)), static_cast<int>(x.size(1)),
                           static_cast<int>(head_dim), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "rotary_forward_: ", cudaGetErrorString(err));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scaled_softmax_forward", &scaled_softmax_forward, "fused scale + (causal) softmax + dropout (CUDA)",
        py::arg("x"), py::arg("scale") = 1.0, py::arg("dropout_p") = 0.0, py::arg("seed") = 0,
        py::arg("causal") = false, py::arg("q_len") = 1);
  m.def("transpose_forward", &transpose_forward, "tiled 2-D transpose (CUDA)");
  m.def("rotary_forward_", &rotary_forward_, "in-place NeoX rotary embedding (CUDA)");
}
