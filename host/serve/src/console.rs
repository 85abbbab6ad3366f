//! The web console, at `/`: static files compiled into the binary (no network needed to load
//! it), served without authentication; everything it shows it reads from the `/v1` API with the
//! tenant's token. Charts are drawn by uPlot, vendored with its licence under `console/vendor/`.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX: &str = include_str!("console/index.html");
const APP: &str = include_str!("console/app.js");
const UPLOT_JS: &str = include_str!("console/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("console/vendor/uplot/uPlot.min.css");

/// The page may load scripts and styles only from the service itself.
const CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; object-src 'none'; frame-ancestors 'none'";

fn file(body: &'static str, content_type: &'static str) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, content_type), (header::CONTENT_SECURITY_POLICY, CSP)], body)
}

pub(super) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { file(INDEX, "text/html; charset=utf-8") }))
        .route("/console/app.js", get(|| async { file(APP, "text/javascript; charset=utf-8") }))
        .route("/console/uPlot.iife.min.js", get(|| async { file(UPLOT_JS, "text/javascript; charset=utf-8") }))
        .route("/console/uPlot.min.css", get(|| async { file(UPLOT_CSS, "text/css; charset=utf-8") }))
}
