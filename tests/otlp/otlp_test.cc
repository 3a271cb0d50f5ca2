// The protobuf writer, the OTLP encoders, W3C trace context, and the GenAI mapping of a record.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "telemetry/otlp/encode.h"
#include "telemetry/otlp/genai.h"
#include "telemetry/otlp/proto_writer.h"
#include "telemetry/trace_context.h"

namespace kvgate::telemetry::otlp {
namespace {

std::string Hex(const std::string& bytes) {
  return HexOf(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

// A protobuf reader for the tests: the fields of one message, in order.
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t varint = 0;  // varint and fixed64
  std::string bytes;    // length-delimited
};
std::vector<Field> Fields(const std::string& message) {
  std::vector<Field> out;
  size_t i = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; i < message.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(message[i++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  while (i < message.size()) {
    Field f;
    const uint64_t tag = varint();
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (f.wire == 0) {
      f.varint = varint();
    } else if (f.wire == 1) {
      for (int k = 0; k < 8; ++k)
        f.varint |= uint64_t{static_cast<uint8_t>(message[i + k])} << (8 * k);
      i += 8;
    } else if (f.wire == 2) {
      const size_t n = varint();
      f.bytes = message.substr(i, n);
      i += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire;
      break;
    }
    out.push_back(std::move(f));
  }
  return out;
}
std::vector<Field> Named(const std::vector<Field>& fields, uint32_t number) {
  std::vector<Field> out;
  for (const Field& f : fields) {
    if (f.number == number) out.push_back(f);
  }
  return out;
}

TEST(ProtoWriter, VarintsFixedAndLengthDelimited) {
  ProtoWriter w;
  w.Varint(1, 150);  // the protobuf docs' example: 08 96 01
  EXPECT_EQ(Hex(w.bytes()), "089601");
  ProtoWriter neg;
  neg.Int64(3, -1);  // ten bytes of varint
  EXPECT_EQ(Hex(neg.bytes()), "18ffffffffffffffffff01");
  ProtoWriter fixed;
  fixed.Fixed64(7, 0x0102030405060708ull);
  EXPECT_EQ(Hex(fixed.bytes()), "390807060504030201");
  ProtoWriter d;
  d.Double(4, 1.0);
  EXPECT_EQ(Hex(d.bytes()), "21000000000000f03f");
  ProtoWriter s;
  s.Bytes(2, "testing");
  EXPECT_EQ(Hex(s.bytes()), "120774657374696e67");
  ProtoWriter nested;
  nested.Message(3, [](ProtoWriter& m) { m.Varint(1, 150); });
  EXPECT_EQ(Hex(nested.bytes()), "1a03089601");
  ProtoWriter packed;
  packed.PackedDouble(7, std::vector<double>{1.0});
  EXPECT_EQ(Hex(packed.bytes()), "3a08000000000000f03f");
}

TEST(TraceContext, ParsesAndFormatsTraceparent) {
  const std::string header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto parent = ParseTraceparent(header);
  ASSERT_TRUE(parent);
  EXPECT_EQ(HexOf(parent->trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexOf(parent->parent_id), "00f067aa0ba902b7");
  EXPECT_TRUE(parent->sampled);
  EXPECT_EQ(FormatTraceparent(parent->trace_id, parent->parent_id, true), header);
  EXPECT_FALSE(
      ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")->sampled);
  // Invalid: upper case, all-zero ids, version ff, wrong lengths, version 00 with a suffix.
  EXPECT_FALSE(ParseTraceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
  EXPECT_FALSE(ParseTraceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"));
  EXPECT_FALSE(ParseTraceparent(""));
  // A later version may carry more fields.
  EXPECT_TRUE(ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"));
}

TEST(TraceContext, ContinuesTheClientsTraceOrStartsOne) {
  RequestTrace continued =
      StartRequestTrace("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", 1.0);
  EXPECT_TRUE(continued.active);
  EXPECT_EQ(HexOf(continued.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexOf(continued.parent_id), "00f067aa0ba902b7");
  EXPECT_FALSE(continued.sampled);  // parent-based: the client's flag wins over ratio 1
  RequestTrace fresh = StartRequestTrace("", 1.0);
  EXPECT_TRUE(fresh.sampled);
  EXPECT_EQ(HexOf(fresh.parent_id), "0000000000000000");
  EXPECT_NE(HexOf(fresh.trace_id), HexOf(StartRequestTrace("", 1.0).trace_id));
  EXPECT_FALSE(StartRequestTrace("garbage", 0.0).sampled);
}

TEST(TraceContext, RatioSamplingKeepsAboutThatShare) {
  int sampled = 0;
  constexpr int kTraces = 20000;
  for (int i = 0; i < kTraces; ++i) sampled += SampledByRatio(NewTraceId(), 0.25) ? 1 : 0;
  EXPECT_NEAR(double(sampled) / kTraces, 0.25, 0.02);
  const TraceId id = NewTraceId();
  EXPECT_EQ(SampledByRatio(id, 0.5), SampledByRatio(id, 0.5));  // deterministic per trace
  EXPECT_FALSE(SampledByRatio(id, 0.0));
  EXPECT_TRUE(SampledByRatio(id, 1.0));
}

RequestRecord SampleRecord() {
  RequestRecord r;
  r.request_id = "req_1";
  r.created_at_us = 1'700'000'000'000'000;
  r.endpoint = "chat.completions";
  r.model = "smart";
  r.upstream_model = "claude-x";
  r.provider = "anth";
  r.provider_type = "anthropic";
  r.target = "claude";
  r.status = "ok";
  r.http_status = 200;
  r.latency_us = 250'000;
  r.ttft_us = 40'000;
  r.response_id = "msg_1";
  r.finish_reason = "stop";
  r.thread_id = "t1";
  r.thread_source = "header";
  r.usage.cache_read = 1000;
  r.usage.cache_write_5m = 200;
  r.usage.cache_write_1h = 0;
  r.usage.cache_write_no_ttl = 0;
  r.usage.uncached = 30;
  r.usage.output = 12;
  r.cost.priced = true;
  r.cost.total = 1'234'000'000;  // pico-USD
  r.cost.missed = 500'000'000;
  r.cache_diagnosis = {{"cause", "prompt_changed"}};
  r.trace = StartRequestTrace("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 1.0);
  AttemptSpan& a = r.trace.attempts.emplace_back();
  a.span_id = NewSpanId();
  a.start_us = 1000;
  a.end_us = 50'000;
  a.target = "claude";
  a.provider_type = "anthropic";
  a.model = "claude-x";
  a.server_address = "127.0.0.1";
  a.server_port = 8443;
  a.status = "upstream_error";
  a.http_status = 503;
  a.error = "overloaded";
  return r;
}

const AttributeValue* Find(const std::vector<Attribute>& attributes, std::string_view key) {
  for (const Attribute& a : attributes) {
    if (a.key == key) return &a.value;
  }
  return nullptr;
}

TEST(GenAi, RequestSpanCarriesTheRecordsNumbers) {
  const std::vector<Span> spans = SpansOf(FinishedFrom(SampleRecord()));
  ASSERT_EQ(spans.size(), 2u);
  const Span& request = spans[0];
  EXPECT_EQ(request.name, "chat smart");
  EXPECT_EQ(request.kind, SpanKind::kServer);
  EXPECT_EQ(HexOf(request.parent_span_id), "00f067aa0ba902b7");
  EXPECT_EQ(request.end_unix_ns - request.start_unix_ns, 250'000'000u);
  const auto& a = request.attributes;
  EXPECT_EQ(std::get<std::string>(*Find(a, "gen_ai.operation.name")), "chat");
  EXPECT_EQ(std::get<std::string>(*Find(a, "gen_ai.provider.name")), "anthropic");
  EXPECT_EQ(std::get<std::string>(*Find(a, "gen_ai.response.model")), "claude-x");
  EXPECT_EQ(std::get<int64_t>(*Find(a, "gen_ai.usage.input_tokens")), 1230);
  EXPECT_EQ(std::get<int64_t>(*Find(a, "gen_ai.usage.cache_read.input_tokens")), 1000);
  EXPECT_EQ(std::get<int64_t>(*Find(a, "gen_ai.usage.cache_creation.input_tokens")), 200);
  EXPECT_EQ(std::get<int64_t>(*Find(a, "kvgate.usage.uncached_tokens")), 30);
  EXPECT_DOUBLE_EQ(std::get<double>(*Find(a, "kvgate.cost.usd")), 0.001234);
  EXPECT_EQ(std::get<std::string>(*Find(a, "kvgate.cache.diagnosis")), "prompt_changed");
  EXPECT_DOUBLE_EQ(std::get<double>(*Find(a, "kvgate.cache.lost_usd")), 0.0005);
  EXPECT_EQ(std::get<std::vector<std::string>>(*Find(a, "gen_ai.response.finish_reasons")),
            std::vector<std::string>{"stop"});
  EXPECT_EQ(Find(a, "error.type"), nullptr);
  const Span& attempt = spans[1];
  EXPECT_EQ(attempt.kind, SpanKind::kClient);
  EXPECT_EQ(attempt.parent_span_id, request.span_id);
  EXPECT_EQ(attempt.trace_id, request.trace_id);
  EXPECT_EQ(std::get<std::string>(*Find(attempt.attributes, "error.type")), "upstream_error");
  EXPECT_EQ(std::get<int64_t>(*Find(attempt.attributes, "server.port")), 8443);
  EXPECT_EQ(attempt.status, StatusCode::kError);
}

TEST(GenAi, CountsNotReportedAreOmitted) {
  RequestRecord r = SampleRecord();
  r.usage = Usage{};
  r.usage.output = 5;
  r.cost = Cost{};
  r.cache_diagnosis = nullptr;
  const std::vector<Span> spans = SpansOf(FinishedFrom(r));
  const auto& a = spans[0].attributes;
  EXPECT_EQ(Find(a, "gen_ai.usage.input_tokens"), nullptr);
  EXPECT_EQ(Find(a, "gen_ai.usage.cache_read.input_tokens"), nullptr);
  EXPECT_EQ(Find(a, "kvgate.usage.uncached_tokens"), nullptr);
  EXPECT_EQ(Find(a, "kvgate.cost.usd"), nullptr);
  EXPECT_EQ(Find(a, "kvgate.cache.diagnosis"), nullptr);
  EXPECT_EQ(std::get<int64_t>(*Find(a, "gen_ai.usage.output_tokens")), 5);
}

TEST(GenAi, NoSpansForAnInactiveTrace) {
  RequestRecord r = SampleRecord();
  r.trace = RequestTrace{};
  EXPECT_TRUE(SpansOf(FinishedFrom(r)).empty());
}

// Every convention name kvgate emits (attributes outside kvgate.*, metric names) is in the
// committed list taken from the semantic conventions (semconv_names.txt names its source).
TEST(GenAi, SemconvNames) {
  std::ifstream file(KVGATE_SOURCE_DIR "/tests/otlp/semconv_names.txt");
  ASSERT_TRUE(file) << "tests/otlp/semconv_names.txt";
  std::set<std::string> known;
  for (std::string line; std::getline(file, line);) {
    if (!line.empty() && line[0] != '#') known.insert(line);
  }
  ASSERT_GT(known.size(), 50u);
  RequestRecord r = SampleRecord();
  r.status = "upstream_error";
  r.http_status = 502;
  std::set<std::string> emitted;
  for (const Span& span : SpansOf(FinishedFrom(r))) {
    for (const Attribute& a : span.attributes) emitted.insert(a.key);
  }
  GenAiMetrics metrics(0);
  metrics.Add(FinishedFrom(SampleRecord()));
  metrics.Add(FinishedFrom(r));
  for (const Histogram& h : metrics.Snapshot(1)) {
    emitted.insert(h.name);
    for (const HistogramPoint& p : h.points) {
      for (const Attribute& a : p.attributes) emitted.insert(a.key);
    }
  }
  EXPECT_TRUE(emitted.contains("gen_ai.client.token.usage"));
  EXPECT_TRUE(emitted.contains("gen_ai.client.operation.duration"));
  EXPECT_TRUE(emitted.contains("gen_ai.server.time_to_first_token"));
  for (const std::string& name : emitted) {
    if (name.starts_with("kvgate.")) continue;
    EXPECT_TRUE(known.contains(name)) << name << " is not a semantic-conventions name";
  }
}

TEST(GenAi, MetricsAreCumulativeHistograms) {
  GenAiMetrics metrics(100);
  metrics.Add(FinishedFrom(SampleRecord()));
  metrics.Add(FinishedFrom(SampleRecord()));
  const std::vector<Histogram> snapshot = metrics.Snapshot(200);
  ASSERT_EQ(snapshot.size(), 3u);
  const Histogram& tokens = snapshot[0];
  EXPECT_EQ(tokens.name, "gen_ai.client.token.usage");
  ASSERT_EQ(tokens.points.size(), 2u);  // input and output
  for (const HistogramPoint& p : tokens.points) {
    EXPECT_EQ(p.count, 2u);
    EXPECT_EQ(p.start_unix_ns, 100u);
    uint64_t total = 0;
    for (uint64_t c : p.bucket_counts) total += c;
    EXPECT_EQ(total, 2u);
    const std::string type = std::get<std::string>(*Find(p.attributes, "gen_ai.token.type"));
    EXPECT_DOUBLE_EQ(p.sum, type == "input" ? 2460 : 24);
  }
  EXPECT_DOUBLE_EQ(snapshot[1].points[0].sum, 0.5);  // two 0.25 s requests
}

TEST(Encode, TracesHaveOtlpsShape) {
  const std::vector<Span> spans = SpansOf(FinishedFrom(SampleRecord()));
  Resource resource{.attributes = {{"service.name", std::string("kvgate")}}};
  const std::string bytes = EncodeTraces(resource, spans, Encoding::kProtobuf);
  const auto top = Fields(bytes);
  ASSERT_EQ(Named(top, 1).size(), 1u);  // resource_spans
  const auto rs = Fields(Named(top, 1)[0].bytes);
  const auto ss = Fields(Named(rs, 2)[0].bytes);  // scope_spans
  const auto list = Named(ss, 2);                 // spans
  ASSERT_EQ(list.size(), 2u);
  const auto span = Fields(list[0].bytes);
  EXPECT_EQ(Hex(Named(span, 1)[0].bytes), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(Named(span, 5)[0].bytes, "chat smart");
  EXPECT_EQ(Named(span, 6)[0].varint, 2u);  // SPAN_KIND_SERVER
  EXPECT_EQ(Named(span, 8)[0].varint - Named(span, 7)[0].varint, 250'000'000u);
  EXPECT_EQ(Named(span, 9).size(), spans[0].attributes.size());
  const std::string json = EncodeTraces(resource, spans, Encoding::kJson);
  EXPECT_NE(json.find("\"traceId\":\"4bf92f3577b34da6a3ce929d0e0e4736\""), std::string::npos);
  EXPECT_NE(json.find("\"intValue\":\"1000\""), std::string::npos);
}

}  // namespace
}  // namespace kvgate::telemetry::otlp
