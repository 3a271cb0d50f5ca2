"""kvgate's AWS SigV4 signer (the one its Bedrock calls use) against botocore's, byte for byte.

Each request of the table is signed twice with the same fixed credentials and time: by
`kvgate sigv4-sign` (the signer in gateway/providers/sigv4.cc, JSON on stdin) and by botocore's
SigV4Auth over an AWSRequest. The Authorization, X-Amz-Date and X-Amz-Security-Token headers must
be equal, and so must the canonical request botocore builds.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

AKID = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
WHEN = datetime.datetime(2026, 3, 14, 15, 9, 26)
UNIX = int(WHEN.replace(tzinfo=datetime.timezone.utc).timestamp())

CLAUDE = "anthropic.claude-sonnet-4-5-20250929-v1%3A0"
ARN = ("arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile"
       "%2Fabc123")

# (name, host, path as sent, query, headers, body, session token, region)
CASES = [
    ("converse", "bedrock-runtime.us-east-1.amazonaws.com", f"/model/{CLAUDE}/converse", "",
     [("content-type", "application/json"), ("accept", "application/json")],
     '{"messages":[{"role":"user","content":[{"text":"hi"}]}]}', "", "us-east-1"),
    ("session token", "bedrock-runtime.us-west-2.amazonaws.com", f"/model/{CLAUDE}/converse-stream",
     "", [("content-type", "application/json"), ("accept", "application/vnd.amazon.eventstream")],
     '{"messages":[]}', "FwoGZXIvYXdzEBYaDH//token+with/odd=chars", "us-west-2"),
    ("arn model id", "bedrock-runtime.eu-central-1.amazonaws.com", f"/model/{ARN}/invoke", "",
     [("content-type", "application/json")], '{"anthropic_version":"bedrock-2023-05-31"}', "",
     "eu-central-1"),
    ("query string", "bedrock-runtime.us-east-1.amazonaws.com", "/model/x/invoke",
     "b=2&a=1&a=0&empty=&c=%2F%20", [("content-type", "application/json")], "{}", "tok",
     "us-east-1"),
    ("port and path prefix", "127.0.0.1:8443", f"/bedrock/model/{CLAUDE}/invoke-with-response-stream",
     "", [("content-type", "application/json"), ("X-Custom", "  spaced   value  ")], "", "",
     "ap-northeast-1"),
    ("dot segments and unicode body", "bedrock-runtime.us-east-1.amazonaws.com",
     "/model/./a/../b//c/converse", "", [("content-type", "application/json; charset=utf-8")],
     '{"text":"h\u00e9llo \u2603"}', "", "us-east-1"),
]


def kvgate_sign(kvgate_bin, host, path, query, headers, body, token, region):
    request = {"method": "POST", "host": host, "path": path, "query": query,
               "headers": [list(h) for h in headers], "body": body, "access_key_id": AKID,
               "secret_access_key": SECRET, "session_token": token, "region": region,
               "service": "bedrock", "unix_seconds": UNIX}
    out = subprocess.run([kvgate_bin, "sigv4-sign"], input=json.dumps(request).encode(),
                         capture_output=True, timeout=30, check=True)
    return json.loads(out.stdout)


def botocore_sign(host, path, query, headers, body, token, region):
    url = f"https://{host}{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method="POST", url=url, data=body.encode(), headers=dict(headers))
    signer = SigV4Auth(Credentials(AKID, SECRET, token or None), "bedrock", region)
    with mock.patch("botocore.auth.get_current_datetime", return_value=WHEN):
        signer.add_auth(request)
    # The canonical request botocore signed: its headers as they were before the signature.
    headers = dict(request.headers.items())
    del request.headers["Authorization"]
    canonical = signer.canonical_request(request)
    return headers, canonical


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_signature_equals_botocore(kvgate_bin, case):
    _, host, path, query, headers, body, token, region = case
    ours = kvgate_sign(kvgate_bin, host, path, query, headers, body, token, region)
    theirs, canonical = botocore_sign(host, path, query, headers, body, token, region)
    assert ours["canonical_request"] == canonical
    assert ours["headers"]["authorization"] == theirs["Authorization"]
    assert ours["headers"]["x-amz-date"] == theirs["X-Amz-Date"] == "20260314T150926Z"
    if token:
        assert ours["headers"]["x-amz-security-token"] == theirs["X-Amz-Security-Token"] == token
        assert "x-amz-security-token" in ours["headers"]["authorization"]
    else:
        assert "x-amz-security-token" not in ours["headers"]
    assert "x-amz-content-sha256" not in ours["headers"]  # SigV4Auth sets none for bedrock


def test_a_changed_byte_changes_the_signature(kvgate_bin):
    _, host, path, query, headers, body, token, region = CASES[0]
    a = kvgate_sign(kvgate_bin, host, path, query, headers, body, token, region)
    b = kvgate_sign(kvgate_bin, host, path, query, headers, body + " ", token, region)
    assert a["headers"]["authorization"] != b["headers"]["authorization"]


def test_bad_input_is_a_clear_error(kvgate_bin):
    out = subprocess.run([kvgate_bin, "sigv4-sign"], input=b"[1, 2]", capture_output=True,
                         timeout=30)
    assert out.returncode == 2
    assert b"JSON object" in out.stderr
