// The CPU implementation of Backend (backend.h): AVX2 kernels when the CPU has them (runtime
// detection), the portable scalar kernels otherwise, multithreaded through a caller-owned pool.
#pragma once

#include <memory>

#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec.h"
#include "local_engine/backend.h"

namespace kvgate::engine {

// `pool` must outlive the backend. Use kernels::cpu::BestIsa() unless testing a specific path.
std::unique_ptr<Backend> MakeCpuBackend(kernels::cpu::ThreadPool* pool, kernels::cpu::Isa isa);

}  // namespace kvgate::engine
