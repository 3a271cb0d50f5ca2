#!/usr/bin/env bash
# CI stages "asan", "asan-full" and "tsan" (docs/testing.md): the C++ test binaries built in their
# own trees with the default compiler and run under the sanitizers; the first report fails the run.
#   asan:      ASan+UBSan (build-asan, -O0), the gtest binaries of every part that reads outside input:
#              the HTTP server and client, the provider adapters and stream translators, config,
#              the telemetry store and journal, diagnosis, alerts, the router, the gateway's
#              integration tests, the GGUF reader and tokenizer, the block pool, and the schema
#              compiler and JSON automaton of constrained decoding. In the default CI stages.
#   asan-full: ASan+UBSan (build-asan-full, -O1), every unit and integration gtest binary: the above plus
#              the engine's and the kernels', whose forward passes make it several times longer.
#   tsan:      TSan (build-tsan, -O1), the tests of the concurrent parts: the HTTP server and client,
#              the telemetry store and its writer thread, the alert engine, and the engine's
#              scheduler thread and thread pool.
# Usage: scripts/ci_sanitizers.sh asan|asan-full|tsan. KVGATE_CI_JOBS sets the parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:?usage: ci_sanitizers.sh asan|asan-full|tsan}
JOBS=${KVGATE_CI_JOBS:-$(nproc)}

case "$MODE" in
  asan|asan-full)
    BUILD=${KVGATE_ASAN_BUILD_DIR:-$ROOT/build-asan}
    SANITIZE=address,undefined
    OPT=-O0
    # asan-full runs forward passes, CPU-bound: its own tree at -O1.
    if [ "$MODE" = asan-full ]; then BUILD=${KVGATE_ASAN_BUILD_DIR:-$ROOT/build-asan-full}; OPT=-O1; fi
    TARGETS=(kvgate_common_tests kvgate_http_tests kvgate_providers_tests kvgate_telemetry_tests
             kvgate_metrics_tests kvgate_diagnosis_tests kvgate_alerts_tests kvgate_router_tests
             kvgate_router_strategy_tests kvgate_gateway_tests kvgate_engine_io_tests kvgate_block_manager_tests
             kvgate_json_constraint_tests)
    # None of the Python-driven tests (e2e, browser, NumPy reference); in asan, not the
    # constrained-decoding tests that generate with the model either (asan-full runs them).
    SELECT=(-LE 'e2e' -E 'NOT_BUILT|engine_logits_vs_numpy_reference|^JsonDecodingTest\.')
    if [ "$MODE" = asan-full ]; then
      TARGETS+=(kvgate_engine_tests kvgate_engine_device_tests kvgate_kernels_tests
                kvgate_cuda_host_tests)
      SELECT=(-LE 'e2e' -E 'NOT_BUILT|engine_logits_vs_numpy_reference')
    fi
    export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    ;;
  tsan)
    BUILD=${KVGATE_TSAN_BUILD_DIR:-$ROOT/build-tsan}
    SANITIZE=thread
    OPT=-O1
    TARGETS=(kvgate_http_tests kvgate_telemetry_tests kvgate_alerts_tests kvgate_engine_tests
             kvgate_kernels_tests)
    # The kernels and engine binaries are here for the thread pool the forward pass runs on, the
    # engine's request lifecycle (cancellation), the prefix cache, the offload tier's I/O thread
    # (two tier tests) and forked choices (their cancellation). Tests that compare whole
    # generations run in the main suite and under asan-full only: under TSan on 2 cores each took
    # from 1 to over 8 minutes (the tier's format checks and forked choices' outputs 2026-12-03:
    # 60 to 258 s each, 19 minutes of CPU together).
    SELECT=(-LE 'e2e' -E 'NOT_BUILT|engine_logits_vs_numpy_reference|^(Quant|Vec|Ops|Sampler|Weights)Test\.|^EngineTest\.(GreedyMatches.*|MaxTokensUsageAndText|StopStringEndsTheStreamBeforeIt|SeededSamplingIsDeterministic)$|^PrefixCacheTest\.SecondTurn|^KvDtypeEngineTest\.GreedyOutputAgreesWithF16|^OffloadEngineTest\.(GreedyOutputIsTheSameWithTheTierOnAndOff|ARestartReusesTheTierFile|ACorruptTierFileIsAMissWithTheSameOutput|ATruncatedTierFileIsAMissWithTheSameOutput)$|^KvDtypeTierTest\.|^ChoicesTest\.(GreedyChoicesEqualASingleRequestAndThePromptIsComputedOnce|SeededChoicesDifferAndRepeat|AForkWithoutRoomWaitsAndRecomputesItsPartialBlock)$')
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/scripts/tsan.supp"
    ;;
  *)
    echo "ci_sanitizers.sh: unknown mode '$MODE' (asan, asan-full or tsan)" >&2
    exit 2
    ;;
esac

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  # -g1: line tables are enough for file:line in reports. ASan's tests run in under a minute while
  # its build takes most of the stage, so it compiles at -O0 (gateway/gateway.cc: 35 s against
  # 59 s at -O1); TSan's engine tests are CPU-bound, so it keeps -O1.
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$OPT -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$OPT -g1 -DNDEBUG" \
    -DKVGATE_SANITIZE="$SANITIZE" -DKVGATE_CUDA=OFF
fi
cmake --build "$BUILD" --target "${TARGETS[@]}" -j"$JOBS"
ctest --test-dir "$BUILD" "${SELECT[@]}" --output-on-failure -j"$JOBS" --timeout 900
