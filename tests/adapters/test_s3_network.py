"""Network settings of both S3 paths (direct client and s3fs) against SeaweedFS: proxies from the environment
(and NO_PROXY), TLS with a private CA (AWS_CA_BUNDLE, a profile's ca_bundle, verify=False), region redirects,
virtual-hosted addressing, named profiles, and the direct client stepping aside for settings it lacks."""

from __future__ import annotations

import logging
import posixpath
import re

import pytest

from energon_arrow.adapters import (
    AccessDenied,
    InvalidStorageOptions,
    RetryPolicy,
    StorageError,
    open_storage,
)
from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY
from tests.adapters.relay import Relay

pytestmark = pytest.mark.s3

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)
PATHS = pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])
KEYS = {"key": ACCESS_KEY, "secret": SECRET_KEY}


@pytest.fixture(autouse=True)
def _no_ambient_network_settings(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "AWS_CA_BUNDLE", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="module")
def proxy(s3_server):
    with Relay(s3_server.endpoint_url) as relay:
        yield relay


@pytest.fixture(scope="module")
def tls_front(s3_server):
    pytest.importorskip("ssl")
    with Relay(s3_server.endpoint_url, tls=True) as relay:
        yield relay


def opened(url_root, key, direct, options):
    folder, name = posixpath.split(key)
    # a fresh s3fs instance: fsspec would otherwise hand back one made under other environment settings
    store = open_storage(f"s3://{url_root}/{folder}", {**options, "skip_instance_cache": True}, retry=FAST)
    store.use_direct_reads = direct
    assert (store._direct is not None) == direct  # the path under test is the one taken
    return store, name


@PATHS
@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy"])
def test_plain_http_goes_through_the_proxy_of_the_environment(
    monkeypatch, proxy, s3_server, s3_object, direct, variable
):
    bucket, key, data = s3_object
    monkeypatch.setenv(variable, proxy.url)
    proxy.requests.clear()
    store, name = opened(bucket, key, direct, {"endpoint_url": s3_server.endpoint_url, **KEYS})
    assert store.read_range(name, 3, 20) == data[3:23]
    gets = [r for r in proxy.requests if r["method"] == "GET"]
    assert gets and gets[0]["target"].startswith(s3_server.endpoint_url + "/")  # forwarded: absolute URL


@PATHS
def test_proxy_credentials_and_botocore_proxies_config(proxy, s3_server, s3_object, direct):
    bucket, key, data = s3_object
    with_auth = proxy.url.replace("http://", "http://user:p%40ss@")
    proxy.requests.clear()
    options = {
        "endpoint_url": s3_server.endpoint_url,
        **KEYS,
        "config_kwargs": {"proxies": {"http": with_auth}},
    }
    store, name = opened(bucket, key, direct, options)
    assert store.read_range(name, 0, 10) == data[:10]
    gets = [r for r in proxy.requests if r["method"] == "GET"]
    assert gets and gets[0]["headers"]["Proxy-Authorization"] == "Basic dXNlcjpwQHNz"  # user:p@ss


@PATHS
def test_no_proxy_bypasses_the_proxy(monkeypatch, proxy, s3_server, s3_object, direct):
    bucket, key, data = s3_object
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.1")
    proxy.requests.clear()
    store, name = opened(bucket, key, direct, {"endpoint_url": s3_server.endpoint_url, **KEYS})
    assert store.read_range(name, 0, 10) == data[:10]
    assert proxy.requests == []


@PATHS
def test_tls_with_a_private_ca_from_aws_ca_bundle(monkeypatch, tls_front, s3_object, direct):
    bucket, key, data = s3_object
    options = {"endpoint_url": tls_front.url, **KEYS}
    store, name = opened(bucket, key, direct, options)
    with pytest.raises(StorageError, match="TLS certificate check failed"):
        store.read_range(name, 0, 10)
    monkeypatch.setenv("AWS_CA_BUNDLE", tls_front.ca_file)
    store, name = opened(bucket, key, direct, options)
    tls_front.requests.clear()
    assert store.read_range(name, 0, 10) == data[:10]
    assert store.read_bytes(name) == data
    if direct:  # (SeaweedFS without identities refuses botocore's unsigned streaming uploads over TLS)
        store.write_atomic("tls.bin", b"over TLS")
        assert store.read_bytes("tls.bin") == b"over TLS"
        puts = [r for r in tls_front.requests if r["method"] == "PUT"]
        assert puts and "Content-MD5" in puts[0]["headers"]  # PUTs over TLS carry a payload checksum


def test_a_put_damaged_in_transit_is_refused_and_sent_again(monkeypatch, tls_front, s3_object):
    bucket, key, _ = s3_object
    monkeypatch.setenv("AWS_CA_BUNDLE", tls_front.ca_file)
    store, _ = opened(bucket, key, True, {"endpoint_url": tls_front.url, **KEYS})
    tls_front.requests.clear()
    tls_front.queue(("corrupt_request",))  # one byte flipped on the way: the Content-MD5 no longer matches
    store.write_atomic("damaged.bin", b"exactly these bytes")
    assert [r["outcome"] for r in tls_front.requests if r["method"] == "PUT"] == [
        "corrupt_request",
        "relayed",
    ]
    assert store.read_bytes("damaged.bin") == b"exactly these bytes"


@PATHS
def test_verify_false_skips_the_certificate_check(tls_front, s3_object, direct):
    bucket, key, data = s3_object
    options = {"endpoint_url": tls_front.url, **KEYS, "client_kwargs": {"verify": False}}
    store, name = opened(bucket, key, direct, options)
    assert store.read_range(name, 5, 5) == data[5:10]


@PATHS
def test_https_is_tunnelled_through_the_proxy(monkeypatch, proxy, tls_front, s3_object, direct):
    bucket, key, data = s3_object
    monkeypatch.setenv("AWS_CA_BUNDLE", tls_front.ca_file)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    proxy.requests.clear()
    store, name = opened(bucket, key, direct, {"endpoint_url": tls_front.url, **KEYS})
    assert store.read_range(name, 1, 9) == data[1:10]
    assert [r["target"] for r in proxy.requests] == [f"127.0.0.1:{tls_front.port}"]  # one CONNECT, kept alive


@PATHS
def test_a_region_redirect_is_followed(proxy, s3_object, direct):
    bucket, key, data = s3_object
    proxy.bucket_region = "eu-test-1"
    try:
        proxy.requests.clear()
        options = {"endpoint_url": proxy.url, **KEYS, "region_name": "us-east-1"}
        store, name = opened(bucket, key, direct, options)
        assert store.read_range(name, 0, 10) == data[:10]
        assert store.read_range(name, 10, 10) == data[10:20]  # the bucket's region is remembered
        regions = [
            re.search(r"/\d+/([^/]+)/s3/", r["headers"]["Authorization"]).group(1) for r in proxy.requests
        ]
        assert regions == ["us-east-1", "eu-test-1", "eu-test-1"]
    finally:
        proxy.bucket_region = None


def test_a_redirect_without_a_region_is_a_clear_error(proxy, s3_object):
    bucket, key, _ = s3_object
    store, name = opened(bucket, key, True, {"endpoint_url": proxy.url, **KEYS})
    proxy.queue(("answer", 301, "PermanentRedirect"))
    with pytest.raises(StorageError, match=r"obj\.bin: .*PermanentRedirect.*set region_name / endpoint_url"):
        store.read_range(name, 0, 10)


@PATHS
def test_virtual_hosted_addressing(monkeypatch, proxy, s3_server, s3_object, direct):
    bucket, key, data = s3_object
    proxy.virtual_domain = "s3.test"  # the proxy resolves *.s3.test to SeaweedFS, path style
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        proxy.requests.clear()
        options = {
            "endpoint_url": f"http://s3.test:{s3_server.s3_port}",
            **KEYS,
            "config_kwargs": {"s3": {"addressing_style": "virtual"}},
        }
        store, name = opened(bucket, key, direct, options)
        assert store.read_range(name, 7, 7) == data[7:14]
        get = [r for r in proxy.requests if r["method"] == "GET"][0]
        assert get["headers"]["Host"] == f"{bucket}.s3.test:{s3_server.s3_port}"
        assert get["target"] == f"http://{bucket}.s3.test:{s3_server.s3_port}/{key}"
    finally:
        proxy.virtual_domain = None


@pytest.fixture
def aws_files(tmp_path, monkeypatch):
    """AWS config and credentials files with profile `ea` (the SeaweedFS keys) and `ea-wrong` (a wrong secret)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    credentials, config = tmp_path / "credentials", tmp_path / "config"
    credentials.write_text(
        f"[ea]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        f"[ea-wrong]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = not-the-secret\n"
    )
    config.write_text("[profile ea]\nregion = us-east-1\n[profile ea-wrong]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    return config


@PATHS
def test_a_named_profile_supplies_the_credentials(aws_files, s3_iam_server, direct):
    bucket = s3_iam_server.create_bucket("ea-profile")
    s3_iam_server.client().put_object(Bucket=bucket, Key="p/f.bin", Body=b"profiled")
    good, name = opened(
        bucket, "p/f.bin", direct, {"profile": "ea", "endpoint_url": s3_iam_server.endpoint_url}
    )
    assert good.read_bytes(name) == b"profiled"
    assert good.read_range(name, 2, 3) == b"ofi"
    bad, _ = opened(
        bucket, "p/f.bin", direct, {"profile": "ea-wrong", "endpoint_url": s3_iam_server.endpoint_url}
    )
    with pytest.raises(AccessDenied, match=r"ea-profile/p/f\.bin"):
        bad.read_range(name, 0, 3)


def test_an_unknown_profile_is_a_clear_error(aws_files, s3_server):
    with pytest.raises(InvalidStorageOptions, match="nope"):
        open_storage("s3://b/p", {"profile": "nope", "endpoint_url": s3_server.endpoint_url}).read_bytes("x")


@PATHS
def test_a_profiles_ca_bundle_is_used(aws_files, tls_front, s3_object, direct):
    bucket, key, data = s3_object
    aws_files.write_text(aws_files.read_text() + f"[profile ea-tls]\nca_bundle = {tls_front.ca_file}\n")
    creds = aws_files.parent / "credentials"
    creds.write_text(
        creds.read_text()
        + f"[ea-tls]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
    )
    store, name = opened(bucket, key, direct, {"profile": "ea-tls", "endpoint_url": tls_front.url})
    assert store.read_range(name, 0, 4) == data[:4]


def test_the_direct_client_steps_aside_for_settings_it_lacks(caplog, s3_server):
    caplog.set_level(logging.DEBUG, logger="energon_arrow.s3")
    options = {**s3_server.storage_options, "requester_pays": True, "skip_instance_cache": True}
    store = open_storage("s3://ea-tests/x", options)
    assert store._direct is None
    assert "requester_pays" in caplog.text and "through s3fs" in caplog.text
    assert open_storage("s3://ea-tests/x", s3_server.storage_options)._direct is not None


@pytest.mark.parametrize(
    "options, reason",
    [
        ({"requester_pays": True}, "requester_pays"),
        ({"config_kwargs": {"signature_version": "s3"}}, "signature_version"),
        ({"config_kwargs": {"proxies": {"https": "https://proxy:3129"}}}, "TLS to the proxy"),
        ({"config_kwargs": {"s3": {"use_accelerate_endpoint": True}}}, "use_accelerate_endpoint"),
        ({"client_kwargs": {"config": None}}, "client_kwargs ['config']"),
        ({"endpoint_url": None}, "no endpoint_url"),
    ],
)
def test_settings_the_direct_client_lacks_are_named(monkeypatch, options, reason):
    from energon_arrow.adapters.s3settings import unsupported_setting

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    merged = {"endpoint_url": "http://127.0.0.1:1", **options}
    assert reason in unsupported_setting(merged, (merged.get("config_kwargs") or {}).get("s3") or {})
    assert unsupported_setting({"endpoint_url": "http://127.0.0.1:1", "profile": "x"}, {}) is None
