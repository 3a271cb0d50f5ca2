#include "local_engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvgate::engine {

Status ValidateSamplingParams(const SamplingParams& p) {
  auto bad = [](const std::string& m) { return MakeError(ErrorCode::kInvalidArgument, m); };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return bad("temperature must be >= 0");
  if (p.top_k < 0) return bad("top_k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return bad("repetition_penalty must be > 0");
  }
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) {
    return bad("penalties must be finite");
  }
  if (p.max_tokens <= 0) return bad("max_tokens must be > 0");
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs) {
    return bad("top_logprobs must be between 0 and " + std::to_string(kMaxTopLogprobs));
  }
  return {};
}

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t chosen, int32_t top_n) {
  float max = -std::numeric_limits<float>::infinity();
  for (float l : logits) max = std::max(max, l);
  double sum = 0.0;
  for (float l : logits) {
    if (l != -std::numeric_limits<float>::infinity()) sum += std::exp(static_cast<double>(l - max));
  }
  const double lse = static_cast<double>(max) + std::log(sum);
  auto logprob = [&](int32_t t) { return static_cast<float>(static_cast<double>(logits[t]) - lse); };
  TokenLogprobs out{chosen, logprob(chosen), {}};
  if (top_n <= 0) return out;
  std::vector<int32_t> ids;
  ids.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != -std::numeric_limits<float>::infinity()) ids.push_back(static_cast<int32_t>(i));
  }
  const size_t n = std::min(ids.size(), static_cast<size_t>(top_n));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t i = 0; i < n; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt)
    : params_(params),
      prompt_tokens_(prompt.begin(), prompt.end()),
      rng_(params.seed ? *params.seed : std::random_device{}()) {
  std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
  prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()),
                       prompt_tokens_.end());
}

void Sampler::ApplyPenalties(std::span<float> logits) const {
  const int64_t v = static_cast<int64_t>(logits.size());
  auto in_range = [v](int32_t t) { return t >= 0 && t < v; };
  if (params_.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t t) {
      float& l = logits[t];
      l = l > 0.0f ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    };
    for (int32_t t : prompt_tokens_) {
      if (in_range(t)) penalize(t);
    }
    for (const auto& [t, n] : output_counts_) {
      if (in_range(t) && !std::binary_search(prompt_tokens_.begin(), prompt_tokens_.end(), t)) {
        penalize(t);
      }
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (const auto& [t, n] : output_counts_) {
      if (in_range(t)) {
        logits[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(n);
      }
    }
  }
}

int32_t Sampler::Sample(std::span<float> logits) {
  ApplyPenalties(logits);
  int32_t chosen = 0;
  if (params_.temperature == 0.0f) {
    chosen = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    const float inv_t = 1.0f / params_.temperature;
    candidates_.clear();
    candidates_.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      candidates_.emplace_back(logits[i] * inv_t, static_cast<int32_t>(i));
    }
    auto by_logit = [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t n = candidates_.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) n = params_.top_k;
    const bool need_sorted = params_.top_p < 1.0f || n < candidates_.size();
    if (need_sorted) {
      std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(), by_logit);
      candidates_.resize(n);
    } else {
      std::swap(*candidates_.begin(),
                *std::max_element(candidates_.begin(), candidates_.end(),
                                  [&](const auto& a, const auto& b) { return by_logit(b, a); }));
    }
    // Softmax over the survivors (candidates_[0] holds the maximum either way).
    const float mx = candidates_[0].first;
    double total = 0.0;
    for (auto& c : candidates_) total += (c.first = std::exp(c.first - mx));
    for (auto& c : candidates_) c.first = static_cast<float>(c.first / total);
    if (params_.top_p < 1.0f) {  // candidates_ is sorted here
      double cum = 0.0;
      size_t keep = 0;
      while (keep < candidates_.size()) {
        cum += candidates_[keep++].first;
        if (cum >= params_.top_p) break;
      }
      candidates_.resize(keep);
    }
    if (params_.min_p > 0.0f) {
      const float floor = params_.min_p * candidates_[0].first;
      std::erase_if(candidates_, [&](const auto& c) { return c.first < floor; });
    }
    double mass = 0.0;
    for (const auto& c : candidates_) mass += c.first;
    std::uniform_real_distribution<double> u(0.0, mass);
    double r = u(rng_);
    chosen = candidates_.back().second;
    for (const auto& c : candidates_) {
      if (r < c.first) {
        chosen = c.second;
        break;
      }
      r -= c.first;
    }
  }
  ++output_counts_[chosen];
  return chosen;
}

void MaskLogits(std::span<float> logits, const TokenBitmask& allowed) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const auto& words = allowed.words();
  const size_t n = std::min(logits.size(), allowed.size());
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = words[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i & 63)) & 1)) logits[i] = kNegInf;
    }
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Output StopMatcher::Push(std::string_view piece) {
  Output out;
  if (stopped_) {
    out.stopped = true;
    return out;
  }
  pending_.append(piece);
  // The stop that starts first wins (the first listed of those starting there).
  size_t first = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = pending_.find(stops_[i]);
    if (at < first) {
      first = at;
      matched_ = i;
    }
  }
  if (first != std::string::npos) {
    out.text = pending_.substr(0, first);
    out.stopped = stopped_ = true;
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  out.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string_view StopMatcher::matched() const {
  return stopped_ ? std::string_view(stops_[matched_]) : std::string_view();
}

std::string StopMatcher::Flush() {
  std::string s;
  s.swap(pending_);
  return stopped_ ? std::string() : s;
}

}  // namespace kvgate::engine
