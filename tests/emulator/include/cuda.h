// Stand-in for <cuda.h> under wave_emu.h (which is force-included and provides everything).
#pragma once
#ifndef WAVE_EMU_H_
#error "compile with -include wave_emu.h"
#endif
