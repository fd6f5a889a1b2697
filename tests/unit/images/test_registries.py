import base64

import pytest

from cri.images.auth import parse_challenge
from cri.images.reference import parse
from cri.images.registries import AuthConfig, RegistriesConfig, RegistriesConfigError

YAML = """
mirrors:
  docker.io:
    endpoint:
      - "https://mirror.example.com:5000"
      - "http://127.0.0.1:5001/v2"
    rewrite:
      "^rancher/(.*)": "mirrorproject/rancher-images/$1"
  registry.k8s.io:
    endpoint: ["http://127.0.0.1:5001"]
  "*":
    endpoint: ["https://catch-all.example.com"]
configs:
  "mirror.example.com:5000":
    auth:
      username: xxx
      password: yyy
    tls:
      ca_file: /etc/ssl/mirror-ca.pem
      cert_file: /etc/ssl/client.pem
      key_file: /etc/ssl/client-key.pem
  "127.0.0.1:5001":
    tls:
      insecure_skip_verify: true
  registry.example.com:
    auth:
      auth: AUTH
""".replace("AUTH", base64.b64encode(b"alice:pw").decode())


@pytest.fixture
def cfg(tmp_path):
    p = tmp_path / "registries.yaml"
    p.write_text(YAML)
    return RegistriesConfig.load(p)


def test_load(cfg):
    assert cfg.mirrors["docker.io"].endpoints == ("https://mirror.example.com:5000", "http://127.0.0.1:5001")
    tls = cfg.configs["mirror.example.com:5000"].tls
    assert tls.ca_file == "/etc/ssl/mirror-ca.pem" and tls.key_file.endswith("client-key.pem")
    assert cfg.configs["127.0.0.1:5001"].tls.insecure_skip_verify
    assert cfg.configs["registry.example.com"].auth.basic() == ("alice", "pw")


def test_docker_hub_mirrors_rewrites_and_default_last(cfg):
    eps = cfg.endpoints(parse("rancher/coredns-coredns:1.6.3"))
    assert [e.url for e in eps] == ["https://mirror.example.com:5000", "http://127.0.0.1:5001",
                                    "https://registry-1.docker.io"]
    mirrored = "mirrorproject/rancher-images/coredns-coredns"
    assert [e.repository for e in eps] == [mirrored] * 2 + ["rancher/coredns-coredns"]
    assert eps[0].auth.basic() == ("xxx", "yyy") and eps[0].tls.ca_file
    assert eps[1].plain_http and eps[1].tls.insecure_skip_verify and eps[1].auth is None
    assert eps[2].is_default and not eps[0].is_default
    # a name the rewrite does not match keeps its path on the mirror
    assert cfg.endpoints(parse("busybox"))[0].repository == "library/busybox"


def test_registry_k8s_io_mirror_and_wildcard(cfg):
    eps = cfg.endpoints(parse("registry.k8s.io/pause:3.9"))
    assert [(e.url, e.repository) for e in eps] == [("http://127.0.0.1:5001", "pause"),
                                                     ("https://registry.k8s.io", "pause")]
    eps = cfg.endpoints(parse("quay.io/org/app:v1"))
    assert [e.url for e in eps] == ["https://catch-all.example.com", "https://quay.io"]


def test_request_auth_goes_to_the_registry_itself(cfg):
    req = AuthConfig(username="bob", password="pw")
    eps = cfg.endpoints(parse("registry.example.com/app:v1"), req)
    assert eps[-1].url == "https://registry.example.com" and eps[-1].auth == req
    assert eps[0].url == "https://catch-all.example.com" and eps[0].auth is None
    assert RegistriesConfig().endpoints(parse("registry.example.com/app:v1"))[0].auth is None


def test_loopback_defaults_try_https_then_http():
    eps = RegistriesConfig().endpoints(parse("127.0.0.1:5000/app"))
    assert [e.url for e in eps] == ["https://127.0.0.1:5000", "http://127.0.0.1:5000"]
    eps = RegistriesConfig().endpoints(parse("localhost:5000/app"))
    assert eps[-1].url == "http://localhost:5000"
    assert [e.url for e in RegistriesConfig().endpoints(parse("quay.io/a/b"))] == ["https://quay.io"]


def test_missing_default_file_is_empty_and_bad_files_fail(tmp_path, monkeypatch):
    import cri.images.registries as registries

    monkeypatch.setattr(registries, "DEFAULT_PATH", tmp_path / "absent.yaml")
    assert RegistriesConfig.load(None).mirrors == {}
    with pytest.raises(FileNotFoundError):
        RegistriesConfig.load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("mirrors:\n  docker.io:\n    rewrite:\n      '(': 'x'\n")
    with pytest.raises(RegistriesConfigError):
        RegistriesConfig.load(bad)
    bad.write_text("mirrors:\n  docker.io:\n    endpoint: ['ftp://x']\n")
    with pytest.raises(RegistriesConfigError):
        RegistriesConfig.load(bad)


def test_auth_config_from_cri():
    assert AuthConfig.from_dict({}) is None
    a = AuthConfig.from_dict({"username": "u", "password": "p", "server_address": "x"})
    assert a and a.basic() == ("u", "p")
    token = AuthConfig.from_dict({"registry_token": "t"})
    assert token and token.registry_token == "t"


def test_parse_challenge():
    scheme, params = parse_challenge('Bearer realm="https://auth.docker.io/token",'
                                     'service="registry.docker.io",scope="repository:library/busybox:pull"')
    assert scheme == "bearer"
    assert params == {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                      "scope": "repository:library/busybox:pull"}
    assert parse_challenge('Basic realm="Registry Realm"') == ("basic", {"realm": "Registry Realm"})
