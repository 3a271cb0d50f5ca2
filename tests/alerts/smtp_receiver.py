"""A real SMTP server for the alert tests (aiosmtpd), on 127.0.0.1.

Modes: --tls starttls (STARTTLS offered and required before MAIL/AUTH), --tls implicit (SMTPS),
--tls none (no TLS offered at all: a client that insists on TLS must refuse to send).
AUTH PLAIN/LOGIN is accepted only for --user/--password. Each received mail is written to
--out-dir as <n>.json: {"mail_from", "rcpt_tos", "content", "tls", "authenticated_as"}.
Writes "ready" to --ready-file once listening; runs until killed.
"""
import argparse
import json
import os
import ssl
import time

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult


class Handler:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "content": envelope.content.decode("utf-8", "replace"),
            # STARTTLS sets session.ssl; implicit TLS shows on the transport.
            "tls": session.ssl is not None
            or server.transport.get_extra_info("ssl_object") is not None,
            "authenticated_as": session.auth_data.login.decode()
            if session.authenticated and session.auth_data is not None
            else None,
        }
        path = os.path.join(self.out_dir, f"{self.count}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.rename(path + ".tmp", path)
        return "250 OK"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tls", choices=["starttls", "implicit", "none"], required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--ready-file", required=True)
    a = p.parse_args()

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = auth_data.login == a.user.encode() and auth_data.password == a.password.encode()
        return AuthResult(success=ok, auth_data=auth_data if ok else None)

    kwargs = dict(
        hostname="127.0.0.1",
        port=a.port,
        authenticator=authenticator,
        auth_required=True,
        # On an implicit-TLS port the connection is already encrypted.
        auth_require_tls=a.tls != "implicit",
    )
    if a.tls != "none":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(a.cert, a.key)
        if a.tls == "starttls":
            kwargs.update(tls_context=ctx, require_starttls=True)
        else:
            kwargs.update(ssl_context=ctx)
    controller = Controller(Handler(a.out_dir), **kwargs)
    controller.start()
    with open(a.ready_file, "w") as f:
        f.write("ready")
    try:
        while True:
            time.sleep(3600)
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
