//! HTTPS for `weir serve --tls-cert FILE --tls-key FILE`: rustls (with the ring provider, which
//! the build already has for `wasi:http`) in front of the same router, one connection per task.
//! Without the two flags the service speaks plain HTTP, for loopback or behind a proxy that
//! terminates TLS.
//!
//! Invariant: a connection whose handshake fails is dropped alone; the accept loop goes on.

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The server's TLS configuration from PEM files: the certificate chain, leaf first, and its
/// private key.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let bad = |what: &Path, e: &dyn std::fmt::Display| format!("{}: {e}", what.display());
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(cert, &e))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it (PEM, `-----BEGIN CERTIFICATE-----`)", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, &e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not make a TLS configuration: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts TLS connections on `listener` and serves `app` on each until `stop` changes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else { return };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
        });
    }
}
