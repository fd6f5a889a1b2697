"""Debian's docker-registry (distribution 2.8) on 127.0.0.1, for pull tests: plain HTTP, TLS with a
self-signed CA, htpasswd basic auth, or token auth with a small token server of our own."""

from __future__ import annotations

import base64
import datetime
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

REGISTRY_BIN = "/usr/bin/docker-registry"
USER, PASSWORD = "puller", "s3cret-pass"
REFRESH_TOKEN = "refresh-" + "x" * 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ca_and_cert(dest: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, cert.pem, key.pem): a CA and a server certificate for 127.0.0.1/localhost; a client
    certificate from the same CA is written beside them (client.pem, client-key.pem)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodeagent test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ckey = ec.generate_private_key(ec.SECP256R1())
    client = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodeagent puller")]))
              .issuer_name(ca_name).public_key(ckey.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    (dest / "client.pem").write_bytes(client.public_bytes(serialization.Encoding.PEM))
    (dest / "client-key.pem").write_bytes(ckey.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))
    paths = dest / "ca.pem", dest / "cert.pem", dest / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class TokenServer:
    """Docker's token protocol: GET ?service&scope with basic credentials, or an OAuth2 refresh-token POST;
    answers a JWT (RS256, x5c) the registry verifies against our root certificate. Anonymous gets nothing."""

    def __init__(self, dest: Path, service: str, issuer: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.service, self.issuer = service, issuer
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "token signer")])
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.bundle = dest / "token-root.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.requests: list[dict] = []
        self.port = free_port()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                q = parse_qs(urlsplit(self.path).query)
                authz = self.headers.get("Authorization", "")
                ok = authz == "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                server.requests.append({"method": "GET", "auth": bool(authz), "scope": q.get("scope", [])})
                if authz and not ok:
                    return self._send(401, {"details": "bad credentials"})
                self._token(q.get("scope", []) if ok else [])

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(n).decode())
                server.requests.append({"method": "POST", "grant": form.get("grant_type", [""])[0]})
                refresh = form.get("grant_type") == ["refresh_token"]
                if not refresh or form.get("refresh_token") != [REFRESH_TOKEN]:
                    return self._send(401, {"details": "bad refresh token"})
                self._token(form.get("scope", []), oauth=True)

            def _token(self, scopes, oauth=False):
                tok = server.sign(scopes)
                self._send(200, {"access_token": tok} if oauth else {"token": tok, "expires_in": 300})

            def _send(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def sign(self, scopes: list[str]) -> str:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding

        access = []
        for scope in " ".join(scopes).split():
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()  # noqa: E731
        header = {"typ": "JWT", "alg": "RS256",
                  "x5c": [base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()]}
        claims = {"iss": self.issuer, "sub": USER, "aud": self.service, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        sig = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64(sig)}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Registry:
    """One docker-registry process with its own config and storage under `workdir`."""

    def __init__(self, workdir: Path, *, tls: bool = False, htpasswd: bool = False, token: bool = False,
                 client_certs: bool = False) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.storage = workdir / "storage"
        self.port = free_port()
        self.tls = tls
        self.ca = None
        self.token_server: TokenServer | None = None
        cfg: dict = {
            "version": 0.1,
            "log": {"level": "error", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}, "delete": {"enabled": True},
                        "cache": {}},
            "http": {"addr": f"127.0.0.1:{self.port}", "secret": uuid.uuid4().hex},
        }
        if tls:
            self.ca, cert, key = make_ca_and_cert(workdir)
            cfg["http"]["tls"] = {"certificate": str(cert), "key": str(key)}
            if client_certs:
                cfg["http"]["tls"]["clientcas"] = [str(self.ca)]
        self.client_cert = (workdir / "client.pem", workdir / "client-key.pem") if tls else None
        self.client_certs = client_certs
        if htpasswd:
            import bcrypt

            pw = workdir / "htpasswd"
            pw.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=5)).decode()}\n")
            cfg["auth"] = {"htpasswd": {"realm": "test", "path": str(pw)}}
        if token:
            self.token_server = TokenServer(workdir, "test-registry", "test-issuer")
            cfg["auth"] = {"token": {"realm": self.token_server.realm, "service": "test-registry",
                                     "issuer": "test-issuer",
                                     "rootcertbundle": str(self.token_server.bundle)}}
        self.config = workdir / "config.yml"
        self.config.write_text(json.dumps(cfg))  # JSON is YAML
        self.log = workdir / "registry.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(self.config)], stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def _wait_ready(self) -> None:
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.ca)) if self.ca else None
        if ctx and self.client_certs and self.client_cert:
            ctx.load_cert_chain(*map(str, self.client_cert))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{self.scheme}://{self.host}/v2/", timeout=1, context=ctx)
                return
            except urllib.error.HTTPError as e:
                if e.code == 401:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("docker-registry did not start")

    def push(self, oci_dir: Path, src_tag: str, name: str, tag: str, *extra: str,
             all_images: bool = False) -> None:
        argv = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
        if self.token_server or (self.config.read_text().find("htpasswd") >= 0):
            argv += ["--dest-creds", f"{USER}:{PASSWORD}"]
        if all_images:
            argv.append("--all")
        if self.client_certs and self.client_cert:
            certs = self.workdir / "skopeo-certs"
            certs.mkdir(exist_ok=True)
            (certs / "client.cert").write_bytes(self.client_cert[0].read_bytes())
            (certs / "client.key").write_bytes(self.client_cert[1].read_bytes())
            argv += ["--dest-cert-dir", str(certs)]
        argv += [*extra, f"oci:{oci_dir}:{src_tag}", f"docker://{self.host}/{name}:{tag}"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"skopeo push failed: {p.stderr}")

    def upload(self, name: str, tag: str, blobs: dict[str, bytes], manifest: bytes, media_type: str) -> None:
        """Push exactly these bytes through the registry API (plain-HTTP, anonymous registries only):
        unlike skopeo, nothing is recompressed on the way."""
        base = f"http://{self.host}/v2/{name}"
        for digest, data in blobs.items():
            req = urllib.request.Request(f"{base}/blobs/uploads/", method="POST", data=b"")
            location = urllib.request.urlopen(req, timeout=30).headers["Location"]
            if location.startswith("/"):
                location = f"http://{self.host}{location}"
            sep = "&" if "?" in location else "?"
            req = urllib.request.Request(f"{location}{sep}digest={digest}", method="PUT", data=data,
                                         headers={"Content-Type": "application/octet-stream"})
            urllib.request.urlopen(req, timeout=30).read()
        req = urllib.request.Request(f"{base}/manifests/{tag}", method="PUT", data=manifest,
                                     headers={"Content-Type": media_type})
        urllib.request.urlopen(req, timeout=30).read()

    def blob_path(self, digest: str) -> Path:
        hexd = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.token_server:
            self.token_server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
