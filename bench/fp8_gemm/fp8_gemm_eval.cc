// kvgate_fp8_gemm_eval: what running the model's GEMMs in FP8 (E4M3) would do to its output,
// measured on the CPU before a GPU runs it. Every MatMul of the model goes through the host
// emulation of the CUDA backend's GEMM numerics (kernels/cuda/gemm_emulation.h); everything else
// (embedding, norms, RoPE, attention over an f16 KV cache) is the CPU backend's. The reference is
// the first format listed, bf16 by default: what the CUDA backend's MatMul computes today.
//
//   kvgate_fp8_gemm_eval --model PATH --text FILE --prompts FILE
//                        [--formats bf16,f32,fp8,fp8:bf16-head,fp8-row,fp8-row:bf16-head]
//                        [--max-tokens N] [--threads N]
//
// A format is a GemmFormat name (f32, bf16, fp8 = per-tensor scales, fp8-row = per-row scales),
// optionally with ":bf16-head": the output head stays in bf16.
//
// One JSON line per format: over the text (BOS + its tokens, 512-token prefill chunks) per
// position "nll", "kl" (KL(p_ref || p_format), nats), "top1" (same argmax as the reference) and
// "logit_err" (the RMS over the vocabulary of the logit difference from the reference, less its
// mean, which softmax ignores, over the RMS spread of the reference's logits); and "completions",
// N greedy tokens (default 64, EOS not special) for every prompt of the file (one per line, a user
// message in the chat template), all prompts batched. bench/fp8_gemm/run.py makes the table.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/model_eval/model_eval.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/gemm_emulation.h"
#include "local_engine/cpu_backend.h"
#include "local_engine/gguf.h"
#include "local_engine/tokenizer.h"
#include "local_engine/weights.h"

namespace kvgate::engine {
namespace {

using cuda::GemmFormat;
using cuda::GemmOperand;
using nlohmann::json;

// One run's GEMM numerics: `format` for every MatMul, except the output head
// (WeightMatrix::output_head) in bf16 when head_bf16 is set, the way FP8 checkpoints usually leave
// the head unquantized and the CUDA backend's fp8_gemm does. Written "fp8", or "fp8:bf16-head".
struct GemmChoice {
  GemmFormat format = GemmFormat::kBf16;
  bool head_bf16 = false;
  std::string Name() const { return std::string(cuda::GemmFormatName(format)) + (head_bf16 ? ":bf16-head" : ""); }
};

std::optional<GemmChoice> ParseGemmChoice(std::string_view name) {
  constexpr std::string_view kHead = ":bf16-head";
  const bool head = name.size() > kHead.size() && name.substr(name.size() - kHead.size()) == kHead;
  auto f = cuda::ParseGemmFormat(head ? name.substr(0, name.size() - kHead.size()) : name);
  if (!f) return std::nullopt;
  return GemmChoice{*f, head};
}

// The CPU backend with MatMul replaced by the emulated GEMM of a GemmChoice; every other op
// forwarded.
class EmulatedGemmBackend final : public Backend {
 public:
  EmulatedGemmBackend(Backend& inner, kernels::cpu::ThreadPool& pool, GemmChoice choice)
      : inner_(inner), pool_(pool), choice_(choice) {}

  std::string_view Name() const override { return inner_.Name(); }
  Result<DeviceBuffer> Allocate(size_t bytes) override { return inner_.Allocate(bytes); }
  size_t MemoryCapacity() const override { return inner_.MemoryCapacity(); }
  Result<const void*> UploadWeights(const void* host, size_t bytes) override {
    return inner_.UploadWeights(host, bytes);
  }
  void CopyToHost(const void* src, void* dst, size_t bytes) override { inner_.CopyToHost(src, dst, bytes); }
  bool CopyFromHost(const void* src, void* dst, size_t bytes) override { return inner_.CopyFromHost(src, dst, bytes); }
  Result<DeviceBuffer> AllocateHost(size_t bytes) override { return inner_.AllocateHost(bytes); }
  bool CopyBlocks(std::span<const BlockPlane> src, std::span<const BlockPlane> dst,
                  std::span<const BlockCopy> copies) override {
    return inner_.CopyBlocks(src, dst, copies);
  }
  void Synchronize() override { inner_.Synchronize(); }
  bool SupportsKvDtype(KvDtype dtype) const override { return inner_.SupportsKvDtype(dtype); }
  Status status() const override { return inner_.status(); }
  StepMode BeginStep(const BatchMetadata& batch, std::span<const int32_t> gather_rows, const StepKey& key) override {
    return inner_.BeginStep(batch, gather_rows, key);
  }
  bool EndStep() override { return inner_.EndStep(); }
  void Embed(const WeightMatrix& table, const BatchMetadata& batch, float* out) override {
    inner_.Embed(table, batch, out);
  }
  void RmsNorm(const float* x, const float* weight, int64_t t, int64_t d, float eps, float* out) override {
    inner_.RmsNorm(x, weight, t, d, eps, out);
  }
  void Rope(float* x, int64_t heads, int64_t head_dim, float theta, const BatchMetadata& batch) override {
    inner_.Rope(x, heads, head_dim, theta, batch);
  }
  void WriteKv(const float* k, const float* v, int64_t kv_dim, const BatchMetadata& batch,
               const KvCacheLayer& cache) override {
    inner_.WriteKv(k, v, kv_dim, batch, cache);
  }
  void Attention(const float* q, const KvCacheLayer& cache, const AttentionShape& shape, const BatchMetadata& batch,
                 float* out) override {
    inner_.Attention(q, cache, shape, batch, out);
  }
  void SwiGlu(const float* gate, const float* up, int64_t n, float* out) override { inner_.SwiGlu(gate, up, n, out); }
  void Add(float* x, const float* y, int64_t n) override { inner_.Add(x, y, n); }
  void GatherRows(const float* x, int64_t d, std::span<const int32_t> rows, float* out) override {
    inner_.GatherRows(x, d, rows, out);
  }

  void MatMul(const float* x, int64_t t, int64_t k, std::span<const MatMulOutput> outs) override {
    const GemmFormat format = FormatOf(*outs.front().w);  // the head is alone in its call
    const GemmOperand xo = cuda::MakeGemmOperand(x, t, k, format);
    for (const MatMulOutput& o : outs) {
      const GemmOperand& w = Weight(*o.w, format);
      pool_.ParallelFor(static_cast<size_t>(w.rows), 64, [&](size_t begin, size_t end) {
        cuda::EmulatedGemmColumns(xo, w, static_cast<int64_t>(begin), static_cast<int64_t>(end), o.out, w.rows);
      });
    }
  }

 private:
  // The weight as the GEMM reads it, made once: dequantized from GGUF, rounded to bf16 for every
  // format but f32 (the CUDA backend dequantizes to bf16 and quantizes FP8 from that), then put
  // in the format.
  GemmFormat FormatOf(const WeightMatrix& w) const {
    return choice_.head_bf16 && w.output_head ? GemmFormat::kBf16 : choice_.format;
  }

  const GemmOperand& Weight(const WeightMatrix& w, GemmFormat format) {
    auto it = weights_.find(w.data);
    if (it != weights_.end()) return it->second;
    const size_t n = static_cast<size_t>(w.rows * w.cols);
    std::vector<float> f(n);
    if (w.type == GgmlType::kQ8_0) {
      kernels::cpu::DequantizeQ8_0(static_cast<const kernels::cpu::BlockQ8_0*>(w.data), n, f.data());
    } else {
      kernels::cpu::DequantizeQ4_1(static_cast<const kernels::cpu::BlockQ4_1*>(w.data), n, f.data());
    }
    if (format != GemmFormat::kF32) {
      for (float& v : f) v = cuda::RoundBf16(v);
    }
    return weights_.emplace(w.data, cuda::MakeGemmOperand(f.data(), w.rows, w.cols, format)).first->second;
  }

  Backend& inner_;
  kernels::cpu::ThreadPool& pool_;
  const GemmChoice choice_;
  std::map<const void*, GemmOperand> weights_;
};

struct Args {
  std::string model, text, prompts;
  std::vector<GemmChoice> formats{{GemmFormat::kBf16},
                                  {GemmFormat::kF32},
                                  {GemmFormat::kFp8Tensor},
                                  {GemmFormat::kFp8Tensor, true},
                                  {GemmFormat::kFp8Row},
                                  {GemmFormat::kFp8Row, true}};
  int threads = 2;
  int max_tokens = 64;
};

constexpr const char* kUsage =
    "usage: kvgate_fp8_gemm_eval --model PATH --text FILE --prompts FILE\n"
    "                            [--formats bf16,f32,fp8,fp8-row] [--max-tokens N] [--threads N]\n";

int Fail(const std::string& what) {
  std::fprintf(stderr, "kvgate_fp8_gemm_eval: %s\n", what.c_str());
  return 1;
}

// Per position: the centred RMS logit difference over the reference's RMS spread (log-softmax
// rows differ from the logits by a per-row constant, which the centring removes).
json LogitErrors(const std::vector<float>& ref, const std::vector<float>& lp, size_t positions, int64_t vocab) {
  json out = json::array();
  for (size_t i = 0; i < positions; ++i) {
    const float* p = ref.data() + i * vocab;
    const float* q = lp.data() + i * vocab;
    double mean_d = 0, mean_p = 0;
    for (int64_t v = 0; v < vocab; ++v) mean_d += double(q[v]) - p[v], mean_p += p[v];
    mean_d /= vocab, mean_p /= vocab;
    double err = 0, spread = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double d = double(q[v]) - p[v] - mean_d, s = p[v] - mean_p;
      err += d * d, spread += s * s;
    }
    out.push_back(spread > 0 ? std::sqrt(err / spread) : 0.0);
  }
  return out;
}

int Run(const Args& a) {
  std::string text;
  if (!bench::ReadTextFile(a.text, &text)) return Fail("cannot read " + a.text);
  auto file = GgufFile::Open(a.model);
  if (!file) return Fail(file.error().ToString());
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok) return Fail(tok.error().ToString());
  const std::vector<int32_t> ids = bench::TextTokenIds(**tok, text);
  auto prompts = bench::ChatPromptIds(**file, **tok, a.prompts);
  if (!prompts) return Fail(prompts.error().ToString());
  kernels::cpu::ThreadPool pool(a.threads);
  auto cpu = MakeCpuBackend(&pool, kernels::cpu::BestIsa());
  std::vector<float> ref;
  for (const GemmChoice& choice : a.formats) {
    EmulatedGemmBackend backend(*cpu, pool, choice);  // one at a time: its weights take 4 bytes each
    auto weights = LoadWeights(**file, backend);
    if (!weights) return Fail(weights.error().ToString());
    const int64_t vocab = weights->dims.vocab;
    const std::string name = choice.Name();
    auto lp = bench::TextLogProbs(*weights, backend, KvDtype::kFp16, ids);
    if (!lp) return Fail(name + ": " + lp.error().ToString());
    if (ref.empty()) ref = *lp;
    auto completions = bench::GreedyCompletions(*weights, backend, *prompts, a.max_tokens);
    if (!completions) return Fail(name + ": " + completions.error().ToString());
    json line = bench::ScorePositions(ref, *lp, ids, vocab);
    line["format"] = name;
    line["reference"] = a.formats.front().Name();
    line["tokens"] = ids.size();
    line["logit_err"] = LogitErrors(ref, *lp, ids.size() - 1, vocab);
    line["completions"] = *completions;
    std::cout << line.dump() << "\n" << std::flush;
  }
  return 0;
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
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
    } else if (flag == "--formats") {
      a.formats.clear();
      std::istringstream names(v);
      for (std::string name; std::getline(names, name, ',');) {
        auto f = ParseGemmChoice(name);
        if (!f) return Fail("--formats: unknown format '" + name + "' (f32, bf16, fp8, fp8-row[:bf16-head])");
        a.formats.push_back(*f);
      }
      if (a.formats.empty()) return Fail("--formats: none given");
    } else {
      return std::fputs(kUsage, stderr), 2;
    }
  }
  if (a.model.empty() || a.text.empty() || a.prompts.empty()) return std::fputs(kUsage, stderr), 2;
  return Run(a);
}

}  // namespace
}  // namespace kvgate::engine

int main(int argc, char** argv) { return kvgate::engine::Main(argc, argv); }
