// Stand-in for <hip/hip_fp16.h>: half types are not emulated.
#pragma once
