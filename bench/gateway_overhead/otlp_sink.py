"""A collector stand-in for measuring OpenTelemetry export's cost: takes OTLP/HTTP POSTs on
127.0.0.1:PORT, answers 200, and prints how many exports and bytes it got when stopped.

    python3 bench/gateway_overhead/otlp_sink.py 4318 &
    KVGATE_BENCH_CONFIG_TAIL=$'telemetry:\\n  otlp: {endpoint: http://127.0.0.1:4318}\\n' \\
        python3 bench/gateway_overhead/run.py --rounds 3 --seconds 3 --no-litellm
"""

import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

counts = {"posts": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        counts["posts"] += 1
        counts["bytes"] += n
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 4318), Sink)

    def stop(*_):
        print(f"otlp sink: {counts['posts']} exports, {counts['bytes']} bytes", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
