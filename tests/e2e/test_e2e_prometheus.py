"""A real Prometheus server scrapes kvgate's /metrics and answers PromQL about what happened."""
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(prom_port, promql):
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_and_answers_promql(gw, tmp_path):
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus is not installed (scripts/setup.sh installs the Debian package)")
    client = gw.client()
    for i in range(3):
        client.chat.completions.create(model="gpt-4o-mini",
                                       messages=[{"role": "user", "content": f"count me {i}"}],
                                       extra_body={"thread_identifier": "prom-1"})
    gw.wait_turns("prom-1", 3)
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: kvgate
    static_configs: [{{targets: ['127.0.0.1:{gw.port}']}}]
""")
    proc = subprocess.Popen([prometheus, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prom.log", "w"))
    try:
        deadline = time.monotonic() + 60
        result = []
        while time.monotonic() < deadline:
            try:
                result = query(prom_port, 'sum(kvgate_requests_total{model="gpt-4o-mini",'
                                          'provider="openai",status="ok"})')
                if result and float(result[0]["value"][1]) >= 3:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert result, "Prometheus never scraped kvgate: " + (tmp_path / "prom.log").read_text()[-2000:]
        # Other tests share this kvgate, so at least our three requests are counted.
        assert float(result[0]["value"][1]) >= 3
        up = query(prom_port, 'up{job="kvgate"}')
        assert up and up[0]["value"][1] == "1"
        tokens = query(prom_port, 'sum by (kind) (kvgate_tokens_total{model="gpt-4o-mini"})')
        kinds = {r["metric"]["kind"] for r in tokens}
        assert {"uncached", "output"} <= kinds
    finally:
        proc.terminate()
        proc.wait(timeout=20)
