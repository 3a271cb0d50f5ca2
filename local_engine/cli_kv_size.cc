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
constexpr double kDefaultUtilization = 0.9;  // vLLM's gpu_memory_utilization default

struct Options {
  std::optional<std::string> model, gguf, hf_config;
  KvDtype dtype = KvDtype::kBf16;
  std::optional<uint64_t> context;
  std::optional<uint64_t> gpu_bytes, weights_bytes;
  // The flag that set each size, so that its two spellings cannot both be given.
  std::string gpu_flag, weights_flag;
  std::optional<double> utilization;
};

constexpr std::string_view kUsage =
    "usage: kvgate kv-size [--model NAME | --gguf PATH | --hf-config PATH] [--dtype T]\n"
    "                      [--context N] [--gpu-mem SIZE [--gpu-memory-utilization F]\n"
    "                      [--weights SIZE]]\n"
    "  --model NAME      a model from the built-in table (all of them without a model flag)\n"
    "  --gguf PATH       the geometry read from a GGUF file (its file size is the weights)\n"
    "  --hf-config PATH  the geometry read from a Hugging Face config.json\n"
    "  --dtype T         the KV cache's element type: bf16 or f16 (2 bytes a value), int8 or fp8\n"
    "                    (1 byte a value plus a 2-byte scale per token and KV head, as kvgate's\n"
    "                    kv_cache_dtype stores them), fp32 (4); default bf16 (fp16 and f32 are\n"
    "                    read as f16 and fp32)\n"
    "  --context N       tokens per sequence for the per-sequence figures (default: the model's\n"
    "                    context length); sliding-window layers hold at most their window of them\n"
    "  --gpu-mem SIZE    the GPU memory to size a KV pool for: a number and a unit, GB (10^9\n"
    "                    bytes), GiB (2^30), MB or MiB, as in 80GB or 141GiB\n"
    "  --gpu-memory-utilization F\n"
    "                    the share of --gpu-mem that the weights and the KV pool may take, in\n"
    "                    (0, 1], as vLLM's gpu_memory_utilization; default 0.9 (the rest is left\n"
    "                    for activations and the CUDA context)\n"
    "  --weights SIZE    the memory the weights take, in the units of --gpu-mem (default: the\n"
    "                    built-in table's figure, or the GGUF file's size)\n"
    "  --gpu-mem-gib G   --gpu-mem as a bare number of GiB (kept for older scripts)\n"
    "  --weights-gib W   --weights as a bare number of GiB (kept for older scripts)\n"
    "Every size is printed in GiB (2^30 bytes) and GB (10^9 bytes).\n";

Result<uint64_t> ParseGibBytes(std::string_view flag, const std::string& v) {
  double d = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  // Up to 1 PiB: byte counts derived from it stay far inside 64 bits.
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(d) || d < 0 || d > 1 << 20) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        std::string(flag) + " needs a number from 0 to 1048576 (GiB), got '" + v + "'");
  }
  return static_cast<uint64_t>(d * kGiB);
}

Result<uint64_t> ParseContext(const std::string& v) {
  uint64_t n = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  // Up to 2^32 tokens: bytes per session stay inside 64 bits for any real model.
  if (ec != std::errc() || p != v.data() + v.size() || n == 0 || n > (uint64_t{1} << 32)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--context needs an integer from 1 to 4294967296, got '" + v + "'");
  }
  return n;
}

// Sets one of the two spellings of a size (--gpu-mem / --gpu-mem-gib, --weights / --weights-gib).
Status SetSize(std::optional<uint64_t>& slot, std::string& set_by, const std::string& flag,
               Result<uint64_t> bytes) {
  if (!bytes) return std::unexpected(bytes.error());
  if (slot && set_by != flag) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "give " + set_by + " or " + flag + ", not both (they set the same size)");
  }
  slot = *bytes;
  set_by = flag;
  return {};
}

Result<uint64_t> ParseSizeFlag(const std::string& flag, const std::string& v) {
  auto bytes = ParseByteSize(v);
  if (!bytes) return MakeError(ErrorCode::kInvalidArgument, flag + " " + bytes.error().message);
  return bytes;
}

Status ApplyFlag(Options& o, const std::string& flag, const std::string& v) {
  if (flag == "--model") {
    o.model = v;
  } else if (flag == "--gguf") {
    o.gguf = v;
  } else if (flag == "--hf-config") {
    o.hf_config = v;
  } else if (flag == "--dtype") {
    auto d = ParseKvDtype(v);
    if (!d) return std::unexpected(d.error());
    o.dtype = *d;
  } else if (flag == "--context") {
    auto n = ParseContext(v);
    if (!n) return std::unexpected(n.error());
    o.context = *n;
  } else if (flag == "--gpu-mem") {
    return SetSize(o.gpu_bytes, o.gpu_flag, flag, ParseSizeFlag(flag, v));
  } else if (flag == "--gpu-mem-gib") {
    return SetSize(o.gpu_bytes, o.gpu_flag, flag, ParseGibBytes(flag, v));
  } else if (flag == "--weights") {
    return SetSize(o.weights_bytes, o.weights_flag, flag, ParseSizeFlag(flag, v));
  } else if (flag == "--weights-gib") {
    return SetSize(o.weights_bytes, o.weights_flag, flag, ParseGibBytes(flag, v));
  } else {  // --gpu-memory-utilization (ParseArgs passes known flags only)
    auto f = ParseGpuMemoryUtilization(v);
    if (!f) return MakeError(ErrorCode::kInvalidArgument, flag + " " + f.error().message);
    o.utilization = *f;
  }
  return {};
}

// Combinations that would print figures the user did not ask for, or silently ignore a flag.
Status CheckCombination(const Options& o) {
  if ((o.model ? 1 : 0) + (o.gguf ? 1 : 0) + (o.hf_config ? 1 : 0) > 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "give at most one of --model, --gguf, --hf-config");
  }
  if (o.utilization && !o.gpu_bytes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--gpu-memory-utilization applies to --gpu-mem; give --gpu-mem SIZE too");
  }
  return {};
}

Result<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::optional<std::string> value;
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    static constexpr std::string_view kFlags[] = {
        "--model",   "--gguf",        "--hf-config", "--dtype",       "--context",
        "--gpu-mem", "--gpu-mem-gib", "--weights",   "--weights-gib", "--gpu-memory-utilization"};
    if (std::find(std::begin(kFlags), std::end(kFlags), arg) == std::end(kFlags)) {
      return MakeError(ErrorCode::kInvalidArgument, "unknown flag " + arg);
    }
    if (!value) {
      if (i + 1 >= argc) return MakeError(ErrorCode::kInvalidArgument, arg + " needs a value");
      value = argv[++i];
    }
    if (auto st = ApplyFlag(o, arg, *value); !st) return std::unexpected(st.error());
  }
  if (auto st = CheckCombination(o); !st) return std::unexpected(st.error());
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

std::string Gib(uint64_t bytes, int decimals) { return Fixed(bytes / kGiB, decimals); }
std::string Gb(uint64_t bytes, int decimals) { return Fixed(bytes / 1e9, decimals); }

uint64_t ContextOf(const Options& o, const ModelConfig& c) {
  return o.context.value_or(c.context_length);
}

// Sliding layers make bytes/token x context wrong past the window; say how the figures count them.
void PrintSlidingNote(std::ostream& out, const std::vector<ModelConfig>& models) {
  const bool any_sliding = std::any_of(models.begin(), models.end(),
                                       [](const ModelConfig& c) { return c.sliding_window > 0; });
  if (!any_sliding) return;
  out << "sliding windows: a model's swa_layers layers attend to, and cache, only the last\n"
         "`window` tokens, so a session counts them at min(context, window) tokens and its other\n"
         "layers at the whole context; B/token is a token in every layer (its cost while a\n"
         "session is within the window).\n";
}

void PrintGeometry(std::ostream& out, const Options& o, const std::vector<ModelConfig>& models) {
  out << std::left << std::setw(18) << "model" << std::right << std::setw(5) << "attn"
      << std::setw(8) << "layers" << std::setw(9) << "kv_heads" << std::setw(9) << "head_dim"
      << std::setw(6) << "dtype" << std::setw(8) << "window" << std::setw(11) << "swa_layers"
      << std::setw(12) << "B/token" << std::setw(9) << "context" << std::setw(13) << "GiB/session"
      << std::setw(12) << "GB/session"
      << "\n";
  for (const ModelConfig& c : models) {
    const uint64_t context = ContextOf(o, c);
    const uint64_t per_session = KvBytesPerSession(c, o.dtype, context);
    const bool sliding = c.sliding_window > 0;
    out << std::left << std::setw(18) << c.name << std::right << std::setw(5)
        << (c.uses_mla() ? "MLA" : "GQA") << std::setw(8) << c.n_layers << std::setw(9)
        << (c.uses_mla() ? 1 : c.n_kv_heads) << std::setw(9)
        << (c.uses_mla() ? c.kv_lora_rank + c.qk_rope_head_dim : c.head_dim) << std::setw(6)
        << KvDtypeName(o.dtype) << std::setw(8)
        << (sliding ? std::to_string(c.sliding_window) : "-") << std::setw(11)
        << (sliding ? std::to_string(c.n_sliding_layers()) : "-") << std::setw(12)
        << KvBytesPerToken(c, o.dtype) << std::setw(9) << context << std::setw(13)
        << Gib(per_session, 3) << std::setw(12) << Gb(per_session, 3) << "\n";
  }
  PrintSlidingNote(out, models);
}

std::string Utilization(double f) {
  std::ostringstream s;
  s << f;
  return s.str();
}

// Says which reserve was applied and what it leaves, before the capacity rows.
void PrintReserve(std::ostream& out, uint64_t gpu, std::optional<double> given, uint64_t usable) {
  const double f = given.value_or(kDefaultUtilization);
  out << "\nGPU memory: " << FormatGibGb(gpu) << "\n"
      << "reserve:    --gpu-memory-utilization " << Utilization(f)
      << (given ? "" : " (the default, as vLLM's)") << "\n"
      << "usable:     " << FormatGibGb(usable) << " for the weights and the KV pool; "
      << FormatGibGb(gpu - usable) << " held back\n"
      << "            for activations and the CUDA context\n"
      << "kv_pool is the usable memory minus the weights (vLLM also takes out its measured\n"
         "activation peak, so a real pool is somewhat smaller); sessions: whole sessions of\n"
         "`context` tokens in it.\n";
}

// The capacity rows, and on `err` a warning for each model whose weights leave no KV pool.
void PrintCapacity(std::ostream& out, std::ostream& err, const Options& o,
                   const std::vector<ModelConfig>& models) {
  const double f = o.utilization.value_or(kDefaultUtilization);
  const uint64_t gpu = *o.gpu_bytes;
  PrintReserve(out, gpu, o.utilization, PlanKvPool(gpu, f, /*weights_bytes=*/0, 0).usable_bytes);
  out << std::left << std::setw(18) << "model" << std::right << std::setw(13) << "weights_GiB"
      << std::setw(12) << "weights_GB" << std::setw(13) << "kv_pool_GiB" << std::setw(12)
      << "kv_pool_GB" << std::setw(10) << "sessions"
      << "\n";
  for (const ModelConfig& c : models) {
    const uint64_t weights = o.weights_bytes.value_or(static_cast<uint64_t>(c.weights_gib * kGiB));
    const uint64_t context = ContextOf(o, c);
    const KvPoolPlan plan = PlanKvPool(gpu, f, weights, KvBytesPerSession(c, o.dtype, context));
    const bool known = weights > 0 || o.weights_bytes;
    out << std::left << std::setw(18) << c.name << std::right << std::setw(13)
        << (known ? Gib(weights, 2) : "?") << std::setw(12) << (known ? Gb(weights, 2) : "?")
        << std::setw(13) << Gib(plan.pool_bytes, 2) << std::setw(12) << Gb(plan.pool_bytes, 2)
        << std::setw(10) << plan.sessions << "\n";
    if (!known) {
      err << "kv-size: note: " << c.name
          << ": the weights' size is unknown and counted as 0; give --weights SIZE\n";
    }
    if (context == 0) {
      err << "kv-size: note: " << c.name << ": the context length is unknown; give --context N\n";
    }
    if (!plan.weights_fit) {
      err << "kv-size: warning: " << c.name << ": the weights, " << FormatGibGb(weights)
          << ", do not fit in the usable memory, " << FormatGibGb(plan.usable_bytes) << " = "
          << Utilization(f) << " x " << FormatGibGb(gpu) << ": no room for a KV pool, 0 sessions\n";
    }
  }
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
    err << "kv-size: " << opts.error().message << "\n" << kUsage;
    return 2;
  }
  auto models = SelectModels(*opts);
  if (!models) {
    err << "kv-size: " << models.error().message << "\n";
    return 1;
  }
  if (opts->weights_bytes && models->size() != 1) {
    err << "kv-size: " << opts->weights_flag
        << " needs a single model (--model, --gguf or --hf-config)\n";
    return 2;
  }
  PrintGeometry(out, *opts, *models);
  if (opts->gpu_bytes) PrintCapacity(out, err, *opts, *models);
  return 0;
}

int RunKvSizeCommand(int argc, char** argv) {
  return RunKvSizeCommand(argc, argv, std::cout, std::cerr);
}

}  // namespace kvgate::engine
