//! `weir serve` over HTTPS: a test CA and a certificate it signs, made with `openssl`; the API
//! checked by curl against that CA and by the thin client with `--ca-file`; plain HTTP on the
//! port answered with nothing; and a key that is not one stopping the service at start.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::serve::*;
use crate::common::*;
use serde_json::{Value, json};

/// `--tls-cert` and `--tls-key`: the same API over HTTPS, checked by curl against the
/// certificate; plain HTTP on that port gets nothing; a key that is not one stops the service at
/// start with the file named.
#[test]
fn the_api_is_served_over_https_with_a_certificate_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let (admin_path, admin) = admin_file(dir.path());
    let tls = ["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()];
    let s = Server::start(&dir.path().join("data"), &admin_path, &tls);
    assert!(s.base.starts_with("https://"), "{}", s.base);
    let curl = |url: &str, token: Option<&str>| curl_with(&ca, url, token, None);
    let health = curl(&format!("{}/v1/health", s.base), None);
    assert!(health.status.success(), "{}", String::from_utf8_lossy(&health.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&health.stdout).unwrap()["status"], "ok");
    let tenants = curl(&format!("{}/v1/tenants", s.base), Some(&admin));
    assert_eq!(serde_json::from_slice::<Value>(&tenants.stdout).unwrap()["tenants"], json!([]));
    let plain = curl(&s.base.replace("https://", "http://"), None);
    assert!(!plain.status.success() || plain.stdout.is_empty(), "plain HTTP answered");
    // The thin client over HTTPS, trusting the certificate with --ca-file, and refusing an
    // unknown issuer without it.
    curl_with(&ca, &format!("{}/v1/tenants", s.base), Some(&admin), Some(r#"{"name": "acme"}"#));
    let minted = curl_with(&ca, &format!("{}/v1/tenants/acme/tokens", s.base), Some(&admin), Some(""));
    let token = serde_json::from_slice::<Value>(&minted.stdout).unwrap()["token"].as_str().unwrap().to_string();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let client = |trust: bool| {
        let mut c = weir();
        c.arg("--server").arg(&s.base).arg("--token-file").arg(&token_file);
        if trust {
            c.arg("--ca-file").arg(&ca);
        }
        c.arg("list").output().unwrap()
    };
    let listed = client(true);
    assert_eq!(listed.status.code(), Some(0), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(String::from_utf8(listed.stdout).unwrap().starts_with("NAME"));
    assert_eq!(client(false).status.code(), Some(3), "an issuer it does not know");
    s.kill();
    a_certificate_as_its_key_stops_the_service(dir.path(), &admin_path, &cert);
}

/// A test CA in `dir`, and a server certificate for 127.0.0.1 that it signs: the CA's
/// certificate, the server's certificate and the server's key.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (ca, cert, key) = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    let ext = dir.join("ext.cnf");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let d = dir.to_str().unwrap();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    for args in [
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "1",
                "-subj",
                "/CN=weir-test-ca",
                "-keyout",
                &format!("{d}/ca.key"),
                "-out",
                &format!("{d}/ca.pem"),
            ],
        ]
        .concat(),
        [
            &["req"][..],
            &ec,
            &["-subj", "/CN=localhost", "-keyout", &format!("{d}/key.pem"), "-out", &format!("{d}/leaf.csr")],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            &format!("{d}/leaf.csr"),
            "-CA",
            &format!("{d}/ca.pem"),
            "-CAkey",
            &format!("{d}/ca.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &format!("{d}/ext.cnf"),
            "-out",
            &format!("{d}/cert.pem"),
        ],
    ] {
        let made = std::process::Command::new("openssl").args(&args).output().unwrap();
        assert!(made.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&made.stderr));
    }
    (ca, cert, key)
}

/// curl over HTTPS trusting only `ca`: `token` as the bearer, `post` as a POST's body.
fn curl_with(ca: &Path, url: &str, token: Option<&str>, post: Option<&str>) -> Output {
    let mut c = std::process::Command::new("curl");
    c.args(["-sS", "--cacert"]).arg(ca).arg(url);
    if let Some(t) = token {
        c.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    if let Some(body) = post {
        c.args(["-X", "POST", "--data-binary", body]);
    }
    c.output().unwrap()
}

/// The certificate given as the key too: the service stops at start, exit 2, naming the file.
fn a_certificate_as_its_key_stops_the_service(dir: &Path, admin_path: &Path, cert: &Path) {
    let out = weir()
        .arg("serve")
        .arg("--data")
        .arg(dir.join("data"))
        .args(["--listen", "127.0.0.1:0", "--admin-token-file"])
        .arg(admin_path)
        .args(["--tls-cert", cert.to_str().unwrap(), "--tls-key", cert.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cert.pem"), "{}", String::from_utf8_lossy(&out.stderr));
}
