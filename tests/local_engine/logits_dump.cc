// Test driver: runs the C++ forward pass on token-id prompts and writes the logits of every
// position, so tests/reference/compare_logits.py can check them against the NumPy reference.
//
//   kvgate_logits_dump --model PATH --out FILE --chunk C [--threads N] [--scalar] PROMPT...
//
// PROMPT is a comma-separated list of token ids. All prompts run together as one continuous batch:
// each step takes the next C tokens of every unfinished prompt (C = 1 exercises the decode path,
// a large C a single prefill), so multi-sequence batches, chunked prefill and paged attention
// through scattered block tables are all covered. FILE receives, per prompt in order, its
// [len, V] f32 logits, after a header of int32 (num_prompts, V, len_0, len_1, ...).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "local_engine/cpu_backend.h"
#include "local_engine/model.h"

using namespace kvgate;
using namespace kvgate::engine;

int main(int argc, char** argv) {
  std::string model, out;
  int chunk = 1 << 30, threads = 2;
  bool scalar = false;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--chunk" && i + 1 < argc) chunk = std::stoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::stoi(argv[++i]);
    else if (a == "--scalar") scalar = true;
    else {
      std::vector<int32_t> p;
      size_t pos = 0;
      while (pos < a.size()) {
        size_t end = a.find(',', pos);
        if (end == std::string::npos) end = a.size();
        p.push_back(std::stoi(a.substr(pos, end - pos)));
        pos = end + 1;
      }
      prompts.push_back(std::move(p));
    }
  }
  if (model.empty() || out.empty() || prompts.empty()) {
    std::fprintf(stderr, "usage: kvgate_logits_dump --model PATH --out FILE [--chunk C] PROMPT...\n");
    return 2;
  }
  auto file = GgufFile::Open(model);
  if (!file) return std::fprintf(stderr, "%s\n", file.error().ToString().c_str()), 1;
  kernels::cpu::ThreadPool pool(threads);
  auto backend = MakeCpuBackend(&pool, scalar ? kernels::cpu::Isa::kScalar : kernels::cpu::BestIsa());
  auto weights = LoadWeights(**file, *backend);
  if (!weights) return std::fprintf(stderr, "%s\n", weights.error().ToString().c_str()), 1;
  const int32_t bs = 16, max_blocks = 64;
  auto runner = ModelRunner::Create(*weights, *backend, KvCacheConfig{256, bs});
  if (!runner) return std::fprintf(stderr, "%s\n", runner.error().ToString().c_str()), 1;
  const int64_t vocab = weights->dims.vocab;

  // Blocks handed out round-robin from the end of the pool, so sequences interleave.
  const size_t n = prompts.size();
  std::vector<std::vector<int32_t>> tables(n);
  int32_t next_block = 255;
  std::vector<size_t> done(n, 0);
  std::vector<std::vector<float>> result(n);
  for (size_t i = 0; i < n; ++i) result[i].resize(prompts[i].size() * vocab);
  for (;;) {
    std::vector<int32_t> ids, positions, qstart{0}, ctx, btab;
    std::vector<int64_t> slots;
    std::vector<size_t> seqs;
    for (size_t i = 0; i < n; ++i) {
      if (done[i] == prompts[i].size()) continue;
      const size_t take = std::min<size_t>(chunk, prompts[i].size() - done[i]);
      for (size_t j = 0; j < take; ++j) {
        const int32_t pos = static_cast<int32_t>(done[i] + j);
        if (pos / bs >= static_cast<int32_t>(tables[i].size())) tables[i].push_back(next_block--);
        ids.push_back(prompts[i][pos]);
        positions.push_back(pos);
        slots.push_back(static_cast<int64_t>(tables[i][pos / bs]) * bs + pos % bs);
      }
      qstart.push_back(static_cast<int32_t>(ids.size()));
      ctx.push_back(static_cast<int32_t>(done[i] + take));
      std::vector<int32_t> row(tables[i]);
      row.resize(max_blocks, -1);
      btab.insert(btab.end(), row.begin(), row.end());
      seqs.push_back(i);
    }
    if (seqs.empty()) break;
    BatchMetadata b{ids, positions, slots, qstart, ctx, btab, max_blocks, bs};
    std::vector<float> logits;
    if (auto s = (*runner)->Forward(b, LogitsMode::kAllTokens, logits); !s) {
      return std::fprintf(stderr, "%s\n", s.error().ToString().c_str()), 1;
    }
    for (size_t si = 0; si < seqs.size(); ++si) {
      const size_t i = seqs[si];
      const size_t take = qstart[si + 1] - qstart[si];
      std::memcpy(result[i].data() + done[i] * vocab, logits.data() + qstart[si] * vocab,
                  take * vocab * sizeof(float));
      done[i] += take;
    }
  }
  FILE* f = std::fopen(out.c_str(), "wb");
  if (f == nullptr) return std::fprintf(stderr, "cannot write %s\n", out.c_str()), 1;
  std::vector<int32_t> header{static_cast<int32_t>(n), static_cast<int32_t>(vocab)};
  for (auto& p : prompts) header.push_back(static_cast<int32_t>(p.size()));
  std::fwrite(header.data(), 4, header.size(), f);
  for (auto& r : result) std::fwrite(r.data(), 4, r.size(), f);
  std::fclose(f);
  return 0;
}
