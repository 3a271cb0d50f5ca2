// `kvgate kv-size`: prints KV cache sizes and how many sessions fit on a GPU (see kv_size.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "local_engine/gguf.h"
#include "local_engine/kv_size.h"
#include "local_engine/model_config.h"

namespace kvgate::engine {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Options {
  std::optional<std::string> model, gguf, hf_config;
  KvDtype dtype = KvDtype::kBf16;
  std::optional<uint64_t> context;
  std::optional<double> gpu_gib, weights_gib;
};

constexpr std::string_view kUsage =
    "usage: kv-size [--model NAME | --gguf PATH | --hf-config PATH] [--dtype bf16|f16|int8|fp8|fp32]\n"
    "               [--context N] [--gpu-mem-gib G] [--weights-gib W]\n"
    "  --model NAME      a model from the built-in table (all of them without a model flag)\n"
    "  --gguf PATH       the geometry read from a GGUF file\n"
    "  --hf-config PATH  the geometry read from a Hugging Face config.json\n"
    "  --dtype T         the KV cache's element type: bf16 or f16 (2 bytes a value), int8 or fp8\n"
    "                    (1 byte a value plus a 2-byte scale per token and KV head, as kvgate's\n"
    "                    kv_cache_dtype stores them), fp32 (4); default bf16\n"
    "  --context N       tokens per sequence for the per-sequence figures\n"
    "  --gpu-mem-gib G   the memory to size a KV pool for, in GiB\n"
    "  --weights-gib W   the memory the weights take out of G, in GiB\n";

Result<double> ParseGib(std::string_view flag, const std::string& v) {
  double d = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  // Up to 1 PiB: byte counts derived from it stay far inside 64 bits.
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(d) || d < 0 || d > 1 << 20) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(flag) + " needs a number from 0 to 1048576 (GiB), got '" + v + "'");
  }
  return d;
}

Result<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
      has_value = true;
    }
    auto next = [&]() -> Result<std::string> {
      if (has_value) return value;
      if (i + 1 >= argc) return MakeError(ErrorCode::kInvalidArgument, arg + " needs a value");
      return std::string(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      return MakeError(ErrorCode::kInvalidArgument, "");
    }
    static constexpr std::string_view kFlags[] = {"--model",      "--gguf",    "--hf-config",
                                                  "--dtype",      "--context", "--gpu-mem-gib",
                                                  "--weights-gib"};
    if (std::find(std::begin(kFlags), std::end(kFlags), arg) == std::end(kFlags)) {
      return MakeError(ErrorCode::kInvalidArgument, "unknown flag " + arg);
    }
    auto v = next();
    if (!v) return std::unexpected(v.error());
    if (arg == "--model") {
      o.model = *v;
    } else if (arg == "--gguf") {
      o.gguf = *v;
    } else if (arg == "--hf-config") {
      o.hf_config = *v;
    } else if (arg == "--dtype") {
      auto d = ParseKvDtype(*v);
      if (!d) return std::unexpected(d.error());
      o.dtype = *d;
    } else if (arg == "--context") {
      uint64_t n = 0;
      const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
      // Up to 2^32 tokens: bytes per session stay inside 64 bits for any real model.
      if (ec != std::errc() || p != v->data() + v->size() || n == 0 || n > (uint64_t{1} << 32)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "--context needs an integer from 1 to 4294967296, got '" + *v + "'");
      }
      o.context = n;
    } else if (arg == "--gpu-mem-gib") {
      auto g = ParseGib(arg, *v);
      if (!g) return std::unexpected(g.error());
      o.gpu_gib = *g;
    } else if (arg == "--weights-gib") {
      auto w = ParseGib(arg, *v);
      if (!w) return std::unexpected(w.error());
      o.weights_gib = *w;
    }
  }
  if ((o.model ? 1 : 0) + (o.gguf ? 1 : 0) + (o.hf_config ? 1 : 0) > 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "give at most one of --model, --gguf, --hf-config");
  }
  return o;
}

Result<std::vector<ModelConfig>> SelectModels(const Options& o) {
  if (o.model) {
    auto c = FindBuiltinModelConfig(*o.model);
    if (!c) {
      std::string known;
      for (const ModelConfig& b : BuiltinModelConfigs()) known += " " + b.name;
      return MakeError(ErrorCode::kNotFound, "unknown model '" + *o.model + "'; built in:" + known);
    }
    return std::vector<ModelConfig>{*c};
  }
  if (o.gguf) {
    auto file = GgufFile::Open(*o.gguf);
    if (!file) return std::unexpected(file.error());
    auto c = ModelConfigFromGguf(**file);
    if (!c) return std::unexpected(c.error());
    std::error_code ec;
    const auto size = std::filesystem::file_size(*o.gguf, ec);
    if (!ec) c->weights_gib = static_cast<double>(size) / kGiB;
    return std::vector<ModelConfig>{*c};
  }
  if (o.hf_config) {
    auto c = ModelConfigFromHfConfigFile(*o.hf_config);
    if (!c) return std::unexpected(c.error());
    return std::vector<ModelConfig>{*c};
  }
  return BuiltinModelConfigs();
}

std::string Fixed(double v, int decimals) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(decimals) << v;
  return s.str();
}

}  // namespace

int RunKvSizeCommand(int argc, char** argv, std::ostream& out, std::ostream& err) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      out << kUsage;
      return 0;
    }
  }
  auto opts = ParseArgs(argc, argv);
  if (!opts) {
    if (!opts.error().message.empty()) err << "kv-size: " << opts.error().message << "\n";
    err << kUsage;
    return 2;
  }
  auto models = SelectModels(*opts);
  if (!models) {
    err << "kv-size: " << models.error().message << "\n";
    return 1;
  }
  if (opts->weights_gib && models->size() != 1) {
    err << "kv-size: --weights-gib needs a single model (--model, --gguf or --hf-config)\n";
    return 2;
  }
  out << std::left << std::setw(18) << "model" << std::right << std::setw(5) << "attn"
      << std::setw(8) << "layers" << std::setw(9) << "kv_heads" << std::setw(9) << "head_dim"
      << std::setw(6) << "dtype" << std::setw(12) << "B/token" << std::setw(9) << "context"
      << std::setw(13) << "GiB/session";
  if (opts->gpu_gib) out << std::setw(13) << "weights_GiB" << std::setw(10) << "sessions";
  out << "\n";
  for (const ModelConfig& c : *models) {
    const uint64_t context = opts->context.value_or(c.context_length);
    const uint64_t per_token = KvBytesPerToken(c, opts->dtype);
    const uint64_t per_session = KvBytesPerSession(c, opts->dtype, context);
    out << std::left << std::setw(18) << c.name << std::right << std::setw(5)
        << (c.uses_mla() ? "MLA" : "GQA") << std::setw(8) << c.n_layers << std::setw(9)
        << (c.uses_mla() ? 1 : c.n_kv_heads) << std::setw(9)
        << (c.uses_mla() ? c.kv_lora_rank + c.qk_rope_head_dim : c.head_dim) << std::setw(6)
        << KvDtypeName(opts->dtype) << std::setw(12) << per_token << std::setw(9) << context
        << std::setw(13) << Fixed(static_cast<double>(per_session) / kGiB, 3);
    if (opts->gpu_gib) {
      const double weights = opts->weights_gib.value_or(c.weights_gib);
      const auto gpu = static_cast<uint64_t>(*opts->gpu_gib * kGiB);
      const auto w = static_cast<uint64_t>(weights * kGiB);
      out << std::setw(13) << Fixed(weights, 2) << std::setw(10)
          << (per_session ? SessionsThatFit(gpu, w, per_session) : 0);
    }
    out << "\n";
  }
  return 0;
}

int RunKvSizeCommand(int argc, char** argv) {
  return RunKvSizeCommand(argc, argv, std::cout, std::cerr);
}

}  // namespace kvgate::engine
