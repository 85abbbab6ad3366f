//! TLS material for an `https` registry, read from the files `[registry]` names: roots to trust
//! instead of the Mozilla ones, and a client certificate for mutual TLS.

use std::path::Path;

use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig};

use crate::config::RegistryConfig;

/// The TLS configuration `config` asks for; `None`: the defaults.
pub(crate) fn config(config: &RegistryConfig) -> Result<Option<TlsConfig>, String> {
    if config.ca_file.is_none() && config.client_cert.is_none() {
        return Ok(None);
    }
    let mut tls = TlsConfig::builder();
    if let Some(ca) = &config.ca_file {
        let certs = certificates(ca, "ca_file")?;
        tls = tls.root_certs(RootCerts::new_with_certs(&certs));
    }
    if let Some((cert, key)) = &config.client_cert {
        let chain = certificates(cert, "cert_file")?;
        let pem = std::fs::read(key).map_err(|e| format!("cannot read key_file {}: {e}", key.display()))?;
        let key = ureq::tls::parse_pem(&pem)
            .find_map(|item| match item {
                Ok(PemItem::PrivateKey(k)) => Some(k),
                _ => None,
            })
            .ok_or_else(|| format!("key_file {}: no PEM private key in it", key.display()))?;
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(Some(tls.build()))
}

fn certificates(path: &Path, key: &str) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {key} {}: {e}", path.display()))?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(format!("{key} {}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}
