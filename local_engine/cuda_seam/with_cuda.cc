// The device seam in a build with CUDA: the CUDA backend lives in a plugin (libkvgate_cuda.so,
// next to the executable, or KVGATE_CUDA_PLUGIN), loaded on the first question about CUDA. Linking
// it directly made every kvgate process map cuBLAS (~150 MB RSS) and need the CUDA libraries just
// to start, GPU or not.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "local_engine/cuda_seam/cuda_seam.h"

namespace kvgate::engine::cuda_seam {

const bool kBuiltWithCuda = true;

namespace {

struct Plugin {
  const PluginApi* api = nullptr;
  std::string error;  // why api is null
};

std::string PluginPath() {
  if (const char* env = std::getenv("KVGATE_CUDA_PLUGIN"); env != nullptr && *env != '\0') {
    return env;
  }
  std::string exe(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size());
  if (n <= 0) return "libkvgate_cuda.so";  // the loader's search path
  exe.resize(static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/') + 1) + "libkvgate_cuda.so";
}

Plugin Load() {
  Plugin plugin;
  const std::string path = PluginPath();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    plugin.error = "cannot load the CUDA plugin " + path + ": " + (why ? why : "unknown error");
    return plugin;
  }
  using Entry = const PluginApi* (*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, "kvgate_cuda_plugin_api"));
  const PluginApi* api = entry != nullptr ? entry() : nullptr;
  if (api == nullptr || api->abi_version != kPluginAbiVersion) {
    plugin.error = "the CUDA plugin " + path + " is from another kvgate build";
    return plugin;  // the handle stays open: unloading a half-checked library buys nothing
  }
  plugin.api = api;
  return plugin;
}

// Loaded once per process and never unloaded (backends it made may still be alive): the library
// is process-wide by nature, so this is the one place that caches it.
const Plugin& TheLoadedPlugin() {
  static const Plugin plugin = Load();
  return plugin;
}

}  // namespace

int DeviceCount(std::string* why) {
  const Plugin& plugin = TheLoadedPlugin();
  if (plugin.api == nullptr) {
    if (why) *why = plugin.error;
    return 0;
  }
  return plugin.api->device_count(why);
}

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendChoice& choice) {
  const Plugin& plugin = TheLoadedPlugin();
  if (plugin.api == nullptr) return MakeError(ErrorCode::kUnavailable, plugin.error);
  return plugin.api->make_backend(choice);
}

Result<int64_t> KvTokensForMemoryFraction(double fraction, int64_t kv_bytes_per_token) {
  const Plugin& plugin = TheLoadedPlugin();
  if (plugin.api == nullptr) return MakeError(ErrorCode::kUnavailable, plugin.error);
  return plugin.api->kv_tokens_for_memory_fraction(fraction, kv_bytes_per_token);
}

}  // namespace kvgate::engine::cuda_seam
