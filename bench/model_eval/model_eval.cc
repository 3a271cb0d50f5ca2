#include "bench/model_eval/model_eval.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "local_engine/chat_template.h"
#include "local_engine/model.h"

namespace kvgate::engine::bench {

bool ReadTextFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

std::vector<int32_t> TextTokenIds(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  if (tok.bos_id()) ids.push_back(*tok.bos_id());
  const auto body = tok.Encode(text, /*parse_special=*/false);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

Result<std::vector<std::vector<int32_t>>> ChatPromptIds(const GgufFile& gguf, const Tokenizer& tok,
                                                        const std::string& prompts_path) {
  std::string all;
  if (!ReadTextFile(prompts_path, &all)) return MakeError(ErrorCode::kNotFound, "cannot read " + prompts_path);
  auto tmpl = ChatTemplateFromGguf(gguf);
  if (!tmpl) return std::unexpected(tmpl.error());
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    auto text = ApplyChatTemplate(*tmpl, {ChatMessage{"user", line}}, true);
    if (!text) return std::unexpected(text.error());
    std::vector<int32_t> ids;
    if (tok.add_bos() && tok.bos_id()) ids.push_back(*tok.bos_id());
    const auto body = tok.Encode(*text, /*parse_special=*/true);
    ids.insert(ids.end(), body.begin(), body.end());
    out.push_back(std::move(ids));
  }
  return out;
}

namespace {

// Row-wise log-softmax of logits [n, V], in double for the sums.
void LogSoftmax(std::vector<float>& rows, int64_t vocab) {
  for (size_t r = 0; r * vocab < rows.size(); ++r) {
    float* x = rows.data() + r * vocab;
    float mx = x[0];
    for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(x[i]) - mx);
    const float lse = mx + static_cast<float>(std::log(sum));
    for (int64_t i = 0; i < vocab; ++i) x[i] -= lse;
  }
}

int32_t Argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

}  // namespace

Result<std::vector<float>> TextLogProbs(const ModelWeights& weights, Backend& backend, KvDtype dtype,
                                        const std::vector<int32_t>& ids) {
  const int32_t n = static_cast<int32_t>(ids.size());
  const int32_t blocks = (n + kBlockSize - 1) / kBlockSize;
  auto runner = ModelRunner::Create(weights, backend, KvCacheConfig{blocks, kBlockSize, dtype});
  if (!runner) return std::unexpected(runner.error());
  std::vector<int32_t> table(blocks);
  for (int32_t b = 0; b < blocks; ++b) table[b] = b;
  const int64_t vocab = weights.dims.vocab;
  std::vector<float> all(static_cast<size_t>(n) * vocab), logits;
  constexpr int32_t kChunk = 512;
  for (int32_t start = 0; start < n; start += kChunk) {
    const int32_t len = std::min(kChunk, n - start);
    std::vector<int32_t> chunk(ids.begin() + start, ids.begin() + start + len), positions(len);
    std::vector<int64_t> slots(len);
    for (int32_t i = 0; i < len; ++i) positions[i] = start + i, slots[i] = start + i;
    const std::vector<int32_t> query_start{0, len}, context_lens{start + len};
    const BatchMetadata batch{.token_ids = chunk,
                              .positions = positions,
                              .slot_mapping = slots,
                              .query_start = query_start,
                              .context_lens = context_lens,
                              .block_tables = table,
                              .max_blocks_per_seq = blocks,
                              .block_size = kBlockSize};
    if (auto s = (*runner)->Forward(batch, LogitsMode::kAllTokens, logits); !s) {
      return std::unexpected(s.error());
    }
    std::copy(logits.begin(), logits.end(), all.begin() + static_cast<size_t>(start) * vocab);
  }
  LogSoftmax(all, vocab);
  return all;
}

nlohmann::json ScorePositions(const std::vector<float>& ref, const std::vector<float>& lp,
                              const std::vector<int32_t>& ids, int64_t vocab) {
  nlohmann::json nll = nlohmann::json::array(), kl = nlohmann::json::array(), top1 = nlohmann::json::array();
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* p = ref.data() + i * vocab;
    const float* q = lp.data() + i * vocab;
    double d = 0;
    for (int64_t v = 0; v < vocab; ++v) d += std::exp(double(p[v])) * (double(p[v]) - q[v]);
    nll.push_back(-q[ids[i + 1]]);
    kl.push_back(std::max(0.0, d));
    top1.push_back(Argmax(p, vocab) == Argmax(q, vocab));
  }
  return {{"nll", nll}, {"kl", kl}, {"top1", top1}};
}

Result<std::vector<std::vector<int32_t>>> GreedyCompletions(const ModelWeights& weights, Backend& backend,
                                                            const std::vector<std::vector<int32_t>>& prompts,
                                                            int max_tokens) {
  // Each sequence owns a contiguous run of blocks big enough for its prompt and completion.
  const int32_t s = static_cast<int32_t>(prompts.size());
  int32_t width = 0;
  for (const auto& p : prompts) {
    width = std::max(width, static_cast<int32_t>((p.size() + max_tokens + kBlockSize - 1) / kBlockSize));
  }
  auto runner = ModelRunner::Create(weights, backend, KvCacheConfig{std::max(1, s * width), kBlockSize, KvDtype::kFp16});
  if (!runner) return std::unexpected(runner.error());
  std::vector<int32_t> tables(static_cast<size_t>(s) * width);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
  std::vector<std::vector<int32_t>> out(s);
  std::vector<int32_t> next(s);
  std::vector<float> logits;
  const int64_t vocab = weights.dims.vocab;
  // Step 0 prefills every prompt; each later step feeds every sequence its last token.
  for (int step = 0; step < max_tokens; ++step) {
    std::vector<int32_t> tokens, positions, query_start{0}, context_lens;
    std::vector<int64_t> slots;
    for (int32_t q = 0; q < s; ++q) {
      const std::vector<int32_t> feed = step == 0 ? prompts[q] : std::vector<int32_t>{next[q]};
      const int32_t first = step == 0 ? 0 : static_cast<int32_t>(prompts[q].size()) + step - 1;
      for (size_t i = 0; i < feed.size(); ++i) {
        const int32_t pos = first + static_cast<int32_t>(i);
        tokens.push_back(feed[i]);
        positions.push_back(pos);
        slots.push_back(static_cast<int64_t>(q) * width * kBlockSize + pos);
      }
      query_start.push_back(static_cast<int32_t>(tokens.size()));
      context_lens.push_back(positions.back() + 1);
    }
    const BatchMetadata batch{.token_ids = tokens,
                              .positions = positions,
                              .slot_mapping = slots,
                              .query_start = query_start,
                              .context_lens = context_lens,
                              .block_tables = tables,
                              .max_blocks_per_seq = width,
                              .block_size = kBlockSize};
    if (auto st = (*runner)->Forward(batch, LogitsMode::kLastPerSequence, logits); !st) {
      return std::unexpected(st.error());
    }
    for (int32_t q = 0; q < s; ++q) {
      next[q] = Argmax(logits.data() + static_cast<size_t>(q) * vocab, vocab);
      out[q].push_back(next[q]);
    }
  }
  return out;
}

}  // namespace kvgate::engine::bench
