#include "local_engine/cli_generate.h"

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "local_engine/chat_template.h"
#include "local_engine/engine.h"

namespace kvgate::engine {
namespace {

constexpr const char* kUsage =
    "usage: kvgate generate --model PATH [--chat] --prompt TEXT [--max-tokens N] "
    "[--temperature T] [--seed S] [--device cpu|cuda] [--threads N] [--top-k K] [--top-p P] "
    "[--min-p P] [--repeat-penalty R] [--stop STR]... [--ignore-eos] [--verbose] [--cuda-graphs]\n"
    "[--fp8-gemm] [--kv-cache-dtype f16|bf16|int8|fp8]\n"
    "  --kv-cache-dtype: the KV cache's element type (default f16; int8 and fp8 take half the\n"
    "  memory per token, cpu only)\n"
    "  --cuda-graphs: with --device cuda, replay decode steps as CUDA graphs (experimental: not yet\n"
    "  run on a GPU)\n"
    "  --fp8-gemm: with --device cuda, MatMul in FP8 E4M3 (experimental: not yet run on a GPU)\n";

template <class T>
std::optional<T> Parse(const std::string& s) {
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_same_v<T, float>) {
      v = std::stof(s, &used);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      v = std::stoull(s, &used);
    } else {
      v = std::stoi(s, &used);
    }
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

int RunGenerateCommand(int argc, char** argv) {
  std::string model, prompt;
  bool chat = false, have_prompt = false, verbose = false;
  EngineOptions opts;
  SamplingParams sp;
  sp.max_tokens = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    bool ok = true;
    if (a == "--chat") {
      chat = true;
    } else if (a == "--verbose") {
      verbose = true;
    } else if (a == "--ignore-eos") {
      sp.ignore_eos = true;
    } else if (a == "--cuda-graphs") {
      opts.cuda_graphs = true;
    } else if (a == "--fp8-gemm") {
      opts.fp8_gemm = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      auto v = value();
      if (!v) {
        ok = false;
      } else if (a == "--model") {
        model = *v;
      } else if (a == "--prompt") {
        prompt = *v, have_prompt = true;
      } else if (a == "--stop") {
        sp.stop.push_back(*v);
      } else if (a == "--max-tokens") {
        auto n = Parse<int>(*v);
        ok = n.has_value();
        if (ok) sp.max_tokens = *n;
      } else if (a == "--device") {
        auto d = ParseDevice(*v);
        ok = d.has_value();
        if (ok) opts.device = *d;
      } else if (a == "--kv-cache-dtype") {
        auto d = ParseKvCacheDtype(*v);
        if (!d) {
          std::fprintf(stderr, "kvgate generate: --kv-cache-dtype %s\n%s",
                       d.error().message.c_str(), kUsage);
          return 2;
        }
        opts.kv_cache_dtype = *d;
      } else if (a == "--threads") {
        auto n = Parse<int>(*v);
        ok = n && *n > 0;
        if (ok) opts.threads = *n;
      } else if (a == "--top-k") {
        auto n = Parse<int>(*v);
        ok = n.has_value();
        if (ok) sp.top_k = *n;
      } else if (a == "--seed") {
        auto n = Parse<uint64_t>(*v);
        ok = n.has_value();
        if (ok) sp.seed = *n;
      } else if (a == "--temperature" || a == "--top-p" || a == "--min-p" ||
                 a == "--repeat-penalty") {
        auto f = Parse<float>(*v);
        ok = f.has_value();
        if (ok) {
          (a == "--temperature" ? sp.temperature
           : a == "--top-p"     ? sp.top_p
           : a == "--min-p"     ? sp.min_p
                                : sp.repetition_penalty) = *f;
        }
      } else {
        std::fprintf(stderr, "kvgate generate: unknown option %s\n%s", a.c_str(), kUsage);
        return 2;
      }
    }
    if (!ok) {
      std::fprintf(stderr, "kvgate generate: bad or missing value for %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (model.empty() || !have_prompt) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (auto s = ValidateSamplingParams(sp); !s) {
    std::fprintf(stderr, "kvgate generate: %s\n", s.error().ToString().c_str());
    return 2;
  }
  opts.model_path = model;
  if (opts.cuda_graphs && opts.device != Device::kCuda) {
    std::fprintf(stderr, "kvgate generate: --cuda-graphs needs --device cuda\n%s", kUsage);
    return 2;
  }
  if (opts.fp8_gemm && opts.device != Device::kCuda) {
    std::fprintf(stderr, "kvgate generate: --fp8-gemm needs --device cuda\n%s", kUsage);
    return 2;
  }
  if (auto s = CheckDevice(opts.device); !s) {
    std::fprintf(stderr, "kvgate generate: %s; use --device cpu\n", s.error().message.c_str());
    return 1;
  }
  auto engine = Engine::Create(opts);
  if (!engine) {
    std::fprintf(stderr, "kvgate generate: %s\n", engine.error().ToString().c_str());
    return 1;
  }
  Engine& e = **engine;
  std::string text = prompt;
  if (chat) {
    auto tmpl = ChatTemplateFromGguf(e.gguf());
    if (!tmpl) {
      std::fprintf(stderr, "kvgate generate: %s\n", tmpl.error().ToString().c_str());
      return 1;
    }
    auto applied = ApplyChatTemplate(*tmpl, {ChatMessage{"user", prompt}}, true);
    if (!applied) {
      std::fprintf(stderr, "kvgate generate: %s\n", applied.error().ToString().c_str());
      return 1;
    }
    text = *applied;
  }
  std::vector<int32_t> ids;
  if (e.tokenizer().add_bos() && e.tokenizer().bos_id()) ids.push_back(*e.tokenizer().bos_id());
  const auto body = e.tokenizer().Encode(text, /*parse_special=*/chat);
  ids.insert(ids.end(), body.begin(), body.end());

  if (verbose) {
    std::fprintf(stderr, "prompt token ids:");
    for (int32_t t : ids) std::fprintf(stderr, " %d", t);
    std::fprintf(stderr, "\n");
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::optional<Clock::time_point> first;
  Usage usage;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  auto id = e.AddRequest(EngineRequest{ids, sp, [&](const TokenEvent& ev) {
    if (!first && ev.token_id >= 0) first = Clock::now();
    if (!ev.text.empty()) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
    }
    if (ev.finished) usage = ev.usage, reason = ev.finish_reason, error = ev.error;
  }});
  if (!id) {
    std::fprintf(stderr, "kvgate generate: %s\n", id.error().ToString().c_str());
    return 1;
  }
  while (e.HasWork()) {
    if (auto s = e.Step(); !s) {
      std::fprintf(stderr, "kvgate generate: %s\n", s.error().ToString().c_str());
      return 1;
    }
  }
  const auto end = Clock::now();
  std::fputc('\n', stdout);
  if (reason == FinishReason::kError) {
    std::fprintf(stderr, "kvgate generate: %s\n", error.c_str());
    return 1;
  }
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  const double ttft = first ? secs(*first - start) : secs(end - start);
  const double gen = first ? secs(end - *first) : 0.0;
  std::fprintf(stderr,
               "[%s] prompt %d tokens, completion %d tokens, finish %s; first token %.3f s "
               "(%.1f prompt tok/s), generation %.1f tok/s\n",
               std::string(e.backend_name()).c_str(), usage.prompt_tokens, usage.completion_tokens,
               std::string(FinishReasonName(reason)).c_str(), ttft, usage.prompt_tokens / ttft,
               usage.completion_tokens > 1 ? (usage.completion_tokens - 1) / gen : 0.0);
  return 0;
}

}  // namespace kvgate::engine
