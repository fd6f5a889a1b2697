"""A small admission webhook (the standard library only) for the e2e tests, run as a pod behind a Service.

POST /label: allowed, with a JSONPatch adding the label `webhook.example.com/seen: "true"`.
POST /deny: refuses objects without the label `owner`, with a 403 Status naming why; warns otherwise.
POST /garbage: answers something that is not an AdmissionReview.
POST /slow: allows, after five seconds.
The serving certificate and key are read from /tls (a Secret volume).
"""

import base64
import json
import ssl
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def answer(path, request):
    uid = request["uid"]
    obj = request.get("object") or {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    response = {"uid": uid, "allowed": True}
    if path == "/label":
        value = {**labels, "webhook.example.com/seen": "true"}
        patch = [{"op": "add", "path": "/metadata/labels", "value": value}]
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        response["patchType"] = "JSONPatch"
    elif path == "/deny":
        if "owner" not in labels:
            response["allowed"] = False
            response["status"] = {"code": 403, "reason": "Forbidden",
                                  "message": "every object needs an owner label (asked by "
                                             + request["userInfo"]["username"] + ")"}
        else:
            response["warnings"] = ["owner " + labels["owner"] + " noted"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        path = self.path.split("?")[0]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path == "/slow":
            time.sleep(5)
        if path == "/garbage":
            out = b"<html>not a review</html>"
        else:
            out = json.dumps(answer(path, json.loads(body)["request"])).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, fmt, *args):
        print(self.address_string(), fmt % args, flush=True)


def main():
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain("/tls/tls.crt", "/tls/tls.key")
    server = ThreadingHTTPServer(("0.0.0.0", 8443), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("serving on 8443", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
