import os

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

# A100 (sm_80) and H100 (sm_90); override with TORCH_CUDA_ARCH_LIST for other cards
nvcc_flags = [
    "-O3",
    "--use_fast_math",
    "-gencode", "arch=compute_80,code=sm_80",
    "-gencode", "arch=compute_90,code=sm_90",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "-lineinfo",
]

ext_modules = []
if os.environ.get("LEGACY_GPT_NO_KERNELS", "0") != "1":
    ext_modules.append(
        CUDAExtension(
            name="legacy_gpt_kernels",
            sources=["kernels/fused_softmax_binding.cpp", "kernels/fused_softmax.cu"],
            include_dirs=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")],
            extra_compile_args={"cxx": ["-O3", "-std=c++17"], "nvcc": nvcc_flags},
        )
    )

setup(
    name="legacy-gpt",
    version="0.3.1",
    description="GPT pre-training with FlashAttention-2, GQA and fused kernels",
    packages=find_packages(exclude=["tests", "tests.*"]),
    py_modules=["model", "train", "generate"],
    ext_modules=ext_modules,
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.9",
)
