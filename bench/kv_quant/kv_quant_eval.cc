// kvgate_kv_quant_eval: what a KV cache dtype does to the model's output, against the f16 cache.
// bench/kv_quant/run.py drives it and turns its JSON lines into the table in docs/engine.md.
//
//   kvgate_kv_quant_eval score --model PATH --text FILE [--dtypes f16,bf16,int8,fp8] [--threads N]
//       Runs the text (BOS + its tokens) through the model once per dtype, as prefill chunks of
//       512 tokens, and prints one JSON line per dtype: for every position i, the negative
//       log-likelihood of token i + 1 ("nll"), the KL divergence KL(p_f16 || p_dtype) of the
//       next-token distributions ("kl", nats) and whether both argmaxes agree ("top1"). The
//       first dtype listed must be f16: it is the reference.
//   kvgate_kv_quant_eval generate --model PATH --prompts FILE [--max-tokens N] [--dtypes ...]
//       Greedy completions of every prompt (one per line, as a user message in the model's chat
//       template), all prompts batched in one engine per dtype, EOS ignored so that every
//       completion has exactly N tokens (default 64). One JSON line per (dtype, prompt):
//       {"dtype", "prompt", "tokens"}.
// Both run on the cpu backend (the only one that serves every dtype).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/thread_pool.h"
#include "local_engine/chat_template.h"
#include "local_engine/cpu_backend.h"
#include "local_engine/engine.h"
#include "local_engine/model.h"
#include "local_engine/tokenizer.h"

namespace kvgate::engine {
namespace {

using nlohmann::json;

constexpr const char* kUsage =
    "usage: kvgate_kv_quant_eval score --model PATH --text FILE [--dtypes f16,bf16,int8,fp8]\n"
    "                                  [--threads N]\n"
    "       kvgate_kv_quant_eval generate --model PATH --prompts FILE [--max-tokens N]\n"
    "                                  [--dtypes f16,bf16,int8,fp8] [--threads N]\n";

struct Args {
  std::string mode, model, text, prompts;
  std::vector<KvDtype> dtypes{KvDtype::kFp16, KvDtype::kBf16, KvDtype::kInt8, KvDtype::kFp8};
  int threads = 2;
  int max_tokens = 64;
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "kvgate_kv_quant_eval: %s\n", what.c_str());
  return 1;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

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

// Log-probabilities [n, V] of every position of `ids` with a cache of `dtype`.
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

int Score(const Args& a) {
  if (a.dtypes.front() != KvDtype::kFp16) return Fail("score: the first dtype must be f16");
  std::string text;
  if (!ReadFile(a.text, &text)) return Fail("cannot read " + a.text);
  auto file = GgufFile::Open(a.model);
  if (!file) return Fail(file.error().ToString());
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok) return Fail(tok.error().ToString());
  std::vector<int32_t> ids;
  if ((*tok)->bos_id()) ids.push_back(*(*tok)->bos_id());
  const auto body = (*tok)->Encode(text, /*parse_special=*/false);
  ids.insert(ids.end(), body.begin(), body.end());
  kernels::cpu::ThreadPool pool(a.threads);
  auto backend = MakeCpuBackend(&pool, kernels::cpu::BestIsa());
  auto weights = LoadWeights(**file, *backend);
  if (!weights) return Fail(weights.error().ToString());
  const int64_t vocab = weights->dims.vocab;
  const size_t positions = ids.size() - 1;  // the last token predicts nothing we have
  std::vector<float> ref;
  for (KvDtype dtype : a.dtypes) {
    auto lp = TextLogProbs(*weights, *backend, dtype, ids);
    if (!lp) return Fail(std::string(KvDtypeName(dtype)) + ": " + lp.error().ToString());
    if (dtype == KvDtype::kFp16 && ref.empty()) ref = *lp;
    json nll = json::array(), kl = json::array(), top1 = json::array();
    for (size_t i = 0; i < positions; ++i) {
      const float* p = ref.data() + i * vocab;
      const float* q = lp->data() + i * vocab;
      double d = 0;
      int64_t arg_p = 0, arg_q = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        d += std::exp(double(p[v])) * (double(p[v]) - q[v]);
        if (p[v] > p[arg_p]) arg_p = v;
        if (q[v] > q[arg_q]) arg_q = v;
      }
      nll.push_back(-q[ids[i + 1]]);
      kl.push_back(std::max(0.0, d));
      top1.push_back(arg_p == arg_q);
    }
    std::cout << json{{"mode", "score"}, {"dtype", KvDtypeName(dtype)},
                      {"kv_bytes_per_token", KvBytesPerToken(weights->dims, dtype)},
                      {"tokens", ids.size()}, {"nll", nll}, {"kl", kl}, {"top1", top1}}
                     .dump()
              << "\n" << std::flush;
  }
  return 0;
}

int Generate(const Args& a) {
  std::string all;
  if (!ReadFile(a.prompts, &all)) return Fail("cannot read " + a.prompts);
  std::vector<std::string> prompts;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) prompts.push_back(line);
  }
  for (KvDtype dtype : a.dtypes) {
    EngineOptions opts{.model_path = a.model, .threads = a.threads};
    opts.kv_cache_dtype = dtype;
    opts.max_running = static_cast<int32_t>(prompts.size());
    auto engine = Engine::Create(opts);
    if (!engine) return Fail(engine.error().ToString());
    Engine& e = **engine;
    auto tmpl = ChatTemplateFromGguf(e.gguf());
    if (!tmpl) return Fail(tmpl.error().ToString());
    std::vector<std::vector<int32_t>> out(prompts.size());
    for (size_t p = 0; p < prompts.size(); ++p) {
      auto text = ApplyChatTemplate(*tmpl, {ChatMessage{"user", prompts[p]}}, true);
      if (!text) return Fail(text.error().ToString());
      std::vector<int32_t> ids;
      if (e.tokenizer().add_bos() && e.tokenizer().bos_id()) ids.push_back(*e.tokenizer().bos_id());
      const auto body = e.tokenizer().Encode(*text, /*parse_special=*/true);
      ids.insert(ids.end(), body.begin(), body.end());
      SamplingParams sp;
      sp.max_tokens = a.max_tokens;
      sp.ignore_eos = true;
      auto id = e.AddRequest(EngineRequest{ids, sp, [&out, p](const TokenEvent& ev) {
                                             if (ev.token_id >= 0) out[p].push_back(ev.token_id);
                                           }});
      if (!id) return Fail(id.error().ToString());
    }
    while (e.HasWork()) {
      if (auto s = e.Step(); !s) return Fail(s.error().ToString());
    }
    for (size_t p = 0; p < prompts.size(); ++p) {
      std::cout << json{{"mode", "generate"}, {"dtype", KvDtypeName(dtype)}, {"prompt", p},
                        {"tokens", out[p]}}
                       .dump()
                << "\n";
    }
    std::cout << std::flush;
  }
  return 0;
}

int Main(int argc, char** argv) {
  Args a;
  if (argc < 2) return std::fputs(kUsage, stderr), 2;
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return std::fputs(kUsage, stderr), 2;
    const std::string v = argv[++i];
    if (flag == "--model") {
      a.model = v;
    } else if (flag == "--text") {
      a.text = v;
    } else if (flag == "--prompts") {
      a.prompts = v;
    } else if (flag == "--threads") {
      a.threads = std::stoi(v);
    } else if (flag == "--max-tokens") {
      a.max_tokens = std::stoi(v);
    } else if (flag == "--dtypes") {
      a.dtypes.clear();
      std::istringstream names(v);
      for (std::string name; std::getline(names, name, ',');) {
        auto d = ParseKvCacheDtype(name);
        if (!d) return Fail("--dtypes: " + d.error().message);
        a.dtypes.push_back(*d);
      }
      if (a.dtypes.empty()) return Fail("--dtypes: none given");
    } else {
      return std::fputs(kUsage, stderr), 2;
    }
  }
  if (a.model.empty()) return std::fputs(kUsage, stderr), 2;
  if (a.mode == "score" && !a.text.empty()) return Score(a);
  if (a.mode == "generate" && !a.prompts.empty()) return Generate(a);
  return std::fputs(kUsage, stderr), 2;
}

}  // namespace
}  // namespace kvgate::engine

int main(int argc, char** argv) { return kvgate::engine::Main(argc, argv); }
