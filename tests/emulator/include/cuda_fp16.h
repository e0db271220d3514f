// Stand-in for <cuda_fp16.h>: half types are not emulated.
#pragma once
