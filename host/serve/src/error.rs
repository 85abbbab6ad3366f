//! The one error an API request can end in: an HTTP status and a JSON body that says what went
//! wrong, which field (when one is to blame) and what to do instead:
//! `{"error": "...", "field": "sink.grants.dirs[0].host", "fix": "..."}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct ApiError {
    #[serde(skip)]
    pub status: StatusCode,
    pub error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Line and column of the field in a pipeline file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<[usize; 2]>,
}

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>) -> Self {
        Self { status, error: error.into(), field: None, fix: None, at: None }
    }

    /// `400`: the request is malformed; `field` is to blame.
    pub fn bad(field: impl Into<String>, error: impl Into<String>) -> Self {
        Self { field: Some(field.into()), ..Self::new(StatusCode::BAD_REQUEST, error) }
    }

    /// `404`: no such thing, or not the caller's (the two are not told apart, so names do not
    /// leak across tenants).
    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("no such {what}"))
    }

    /// `409`: the request is well formed but conflicts with what is there.
    pub fn conflict(error: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, error)
    }

    /// `403`: over one of the tenant's quotas.
    pub fn quota(error: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, error).fix("ask the admin for a larger quota, or free some up")
    }

    /// `500`: the service failed (a disk error); the request may be retried.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(&self)).into_response()
    }
}

impl From<super::registry::RegistryError> for ApiError {
    fn from(e: super::registry::RegistryError) -> Self {
        tracing::error!("{e}");
        Self::internal("the service cannot write its registry; the change was not made")
    }
}
