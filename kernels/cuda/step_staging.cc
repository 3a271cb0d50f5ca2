#include "kernels/cuda/step_staging.h"

namespace kvgate::cuda {

StepLayout PlanStepLayout(const StepSources& sources) {
  StepLayout layout;
  size_t at = 0;
  for (int i = 0; i < kStepArrayCount; ++i) {
    layout.offset[i] = at;
    layout.bytes[i] = sources.bytes[i];
    at += (sources.bytes[i] + kStepAlign - 1) / kStepAlign * kStepAlign;
  }
  layout.total = at;
  return layout;
}

bool PackStep(const StepSources& sources, const StepLayout& layout, std::span<std::byte> dst) {
  if (dst.size() < layout.total) return false;
  for (int i = 0; i < kStepArrayCount; ++i) {
    if (layout.bytes[i] != 0) std::memcpy(dst.data() + layout.offset[i], sources.data[i], layout.bytes[i]);
  }
  return true;
}

}  // namespace kvgate::cuda
