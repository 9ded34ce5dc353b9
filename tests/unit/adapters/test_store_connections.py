"""How the store clients are built from the settings, without a server: Cassandra logs in
only with a user and speaks TLS only with a CA file, trusting that file alone (an unusable
one is a ``StoreError``);
a refused login or handshake is named in the error. Redis verifies ``rediss://`` against the
CA file, and a CA file with a plaintext URL is refused."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import pytest
from cassandra import AuthenticationFailed
from cassandra.cluster import NoHostAvailable
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.redis.client import open_client, open_from_settings
from trigger_service.config.stores import CassandraSettings, RedisSettings
from trigger_service.core.errors import ConfigError, StoreError

pytestmark = pytest.mark.timeout(10)

# Any readable PEM bundle serves as "a CA file" where nothing connects.
SYSTEM_CAS = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"


def test_cassandra_without_user_or_ca_connects_plain_and_anonymous() -> None:
    settings = CassandraSettings()
    assert driver.auth_provider(settings) is None
    assert driver.tls_context(settings) is None


def test_cassandra_with_a_user_logs_in_as_that_user() -> None:
    provider = driver.auth_provider(CassandraSettings(username="svc", password="pw"))
    assert provider is not None
    assert (provider.username, provider.password) == ("svc", "pw")


def test_cassandra_with_a_ca_file_verifies_the_node_and_its_address() -> None:
    context = driver.tls_context(CassandraSettings(tls_ca_file=SYSTEM_CAS))
    assert context is not None
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname


def _ca_pem(name: str) -> bytes:
    """A self-signed CA certificate named ``name``, as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def test_cassandra_tls_trusts_the_ca_file_alone_never_the_systems(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # OpenSSL's default trust (what load_default_certs reads) made deterministic: one CA.
    system = tmp_path / "system.pem"
    system.write_bytes(_ca_pem("a public CA"))
    monkeypatch.setenv("SSL_CERT_FILE", str(system))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "no-such-dir"))
    ours = tmp_path / "ca.pem"
    ours.write_bytes(_ca_pem("trigger cassandra CA"))
    context = driver.tls_context(CassandraSettings(tls_ca_file=str(ours)))
    assert context is not None
    trusted = [c["subject"] for c in context.get_ca_certs()]
    assert trusted == [((("commonName", "trigger cassandra CA"),),)]
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname


def test_cassandra_with_a_missing_ca_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="TLS CA file"):
        driver.tls_context(CassandraSettings(tls_ca_file=str(tmp_path / "nope.pem")))


def test_cassandra_with_a_ca_file_that_is_no_pem_is_a_store_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(StoreError, match="TLS CA file"):
        driver.tls_context(CassandraSettings(tls_ca_file=str(junk)))


def test_a_refused_login_is_named_with_the_user() -> None:
    refused = NoHostAvailable("Unable to connect to any servers",
                              {"10.0.0.1:9042": AuthenticationFailed("Bad credentials")})
    message = driver.connect_failure(CassandraSettings(username="svc"), refused)
    assert "authentication refused (user 'svc'" in message
    anonymous = driver.connect_failure(CassandraSettings(), refused)
    assert "authentication refused (no user set" in anonymous


def test_a_failed_handshake_is_named() -> None:
    failed = NoHostAvailable("Unable to connect to any servers", {
        "10.0.0.1:9042": OSError(1, "Last error: [SSL: CERTIFICATE_VERIFY_FAILED] failed")})
    message = driver.connect_failure(CassandraSettings(tls_ca_file=SYSTEM_CAS), failed)
    assert "TLS handshake failed" in message


def test_any_otherconnect_failure_keeps_the_plain_message() -> None:
    down = NoHostAvailable("Unable to connect to any servers",
                           {"10.0.0.1:9042": ConnectionRefusedError(111, "refused")})
    message = driver.connect_failure(CassandraSettings(), down)
    assert message.startswith("cassandra connect failed: ")
    assert "authentication" not in message and "TLS" not in message


async def test_redis_tls_verifies_against_the_ca_file_and_the_host() -> None:
    client = open_from_settings(RedisSettings(url="rediss://svc:pw@127.0.0.1:6380/0",
                                              tls_ca_file=SYSTEM_CAS))
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["ssl_ca_certs"] == SYSTEM_CAS
        assert kwargs["ssl_cert_reqs"] == "required"
        assert kwargs["ssl_check_hostname"] is True
        assert (kwargs["username"], kwargs["password"]) == ("svc", "pw")
    finally:
        await client.aclose()


async def test_redis_tls_without_a_ca_file_still_verifies() -> None:
    client = open_client("rediss://127.0.0.1:6380/0")
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert "ssl_ca_certs" not in kwargs  # the system's CAs
        assert kwargs["ssl_cert_reqs"] == "required"
    finally:
        await client.aclose()


def test_a_redis_ca_file_with_a_plaintext_url_is_refused() -> None:
    with pytest.raises(ConfigError, match="TRIGGER_REDIS_TLS_CA_FILE"):
        open_client("redis://127.0.0.1:6379/0", tls_ca_file=SYSTEM_CAS)
