//! The HTTP/JSON API, `/v1/...` (docs/api.md, docs/openapi.json): routes, bearer-token
//! authentication, body limits, and the translation of requests into [`Service`] calls, which
//! run off the async threads (they sync files and start sandboxes).
//!
//! Invariant: every route but `/v1/health` and the console's static files identifies its caller
//! first; admin routes answer a tenant's token with `404`, tenant routes take the tenant from the
//! token only.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::error::ApiError;
use super::limits;
use super::service::{Action, NewTenant, Service};
use super::tokens::Caller;

type Shared = Arc<Service>;
type Params = Query<HashMap<String, String>>;

pub fn router(service: Shared) -> Router {
    let json = DefaultBodyLimit::max(limits::MAX_JSON_BYTES);
    Router::new()
        .route(
            "/v1/health",
            get(|| async { Json(serde_json::json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")})) }),
        )
        .route("/v1/tenants", get(list_tenants).post(create_tenant).layer(json))
        .route("/v1/tenants/{tenant}/tokens", post(create_token).layer(json))
        .route("/v1/tokens/{id}", axum::routing::delete(revoke_token))
        .route("/v1/plugins", get(list_plugins))
        .route(
            "/v1/plugins/{name}",
            get(get_plugin)
                .put(put_plugin)
                .delete(delete_plugin)
                .layer(DefaultBodyLimit::max(limits::MAX_PLUGIN_BYTES)),
        )
        .route("/v1/files", get(list_files))
        .route("/v1/files/{*path}", get(get_file).put(put_file).layer(DefaultBodyLimit::max(limits::MAX_FILE_BYTES)))
        .route("/v1/pipelines", get(list_pipelines))
        .route(
            "/v1/pipelines/{name}",
            get(get_pipeline)
                .put(put_pipeline)
                .delete(delete_pipeline)
                .layer(DefaultBodyLimit::max(limits::MAX_PIPELINE_BYTES)),
        )
        .route("/v1/pipelines/{name}/file", get(get_pipeline_file))
        .route("/v1/pipelines/{name}/{action}", post(act))
        .route("/v1/pipelines/{name}/progress", get(progress))
        .route("/v1/pipelines/{name}/events", get(events))
        .route("/v1/pipelines/{name}/dead-letters", get(dead_letters))
        .route("/v1/pipelines/{name}/late-events", get(late_events))
        .route("/v1/pipelines/{name}/logs", get(plugin_logs))
        .route("/v1/metrics", get(metrics))
        .merge(super::console::router())
        .fallback(|| async { ApiError::not_found("route") })
        .layer(axum::middleware::map_response(errors_as_json))
        .with_state(service)
}

/// The refusals axum makes before a handler runs (a body past its limit, a path it cannot
/// take, a method the route has not) in the API's JSON shape too.
async fn errors_as_json(response: Response) -> Response {
    let status = response.status();
    let plain = response.headers().get(header::CONTENT_TYPE).is_none_or(|t| t.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() && plain) {
        return response;
    }
    let error = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is past this route's limit (docs/api.md)",
        StatusCode::METHOD_NOT_ALLOWED => "this route does not take that method (docs/api.md)",
        _ => "the request is malformed",
    };
    ApiError::new(status, error).into_response()
}

/// Who the request's bearer token is; `401` without a valid one.
fn caller(s: &Service, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let unauthorized = || {
        ApiError::new(StatusCode::UNAUTHORIZED, "a valid bearer token is required")
            .fix("send `Authorization: Bearer TOKEN` with a token the admin created for you")
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(unauthorized)?;
    s.identify(token.trim()).ok_or_else(unauthorized)
}

fn admin(s: &Service, headers: &HeaderMap) -> Result<Caller, ApiError> {
    match caller(s, headers)? {
        Caller::Admin => Ok(Caller::Admin),
        Caller::Tenant(_) => Err(ApiError::not_found("route")),
    }
}

fn tenant(s: &Service, headers: &HeaderMap) -> Result<(Caller, String), ApiError> {
    match caller(s, headers)? {
        Caller::Tenant(t) => Ok((Caller::Tenant(t.clone()), t)),
        Caller::Admin => Err(ApiError::new(StatusCode::FORBIDDEN, "the admin token manages tenants and tokens")
            .fix("use a tenant's token for its plugins, files and pipelines")),
    }
}

/// Runs `f` on a blocking thread: service calls sync files and instantiate sandboxes.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(ApiError::internal(format!("the request failed: {e}"))))
}

fn flag(q: &HashMap<String, String>, name: &str, default: bool) -> Result<bool, ApiError> {
    match q.get(name).map(String::as_str) {
        None => Ok(default),
        Some("true" | "1") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(v) => Err(ApiError::bad(name, format!("`{v}` is not true or false"))),
    }
}

fn number(q: &HashMap<String, String>, name: &str, default: u64) -> Result<u64, ApiError> {
    q.get(name).map_or(Ok(default), |v| v.parse().map_err(|_| ApiError::bad(name, format!("`{v}` is not a count"))))
}

/// A JSON body as `T`, or `400` naming the field that is wrong.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        ApiError::bad(if field == "." { "(body)".to_string() } else { field }, e.inner().to_string())
    })
}

async fn list_tenants(State(s): State<Shared>, h: HeaderMap) -> Result<impl IntoResponse, ApiError> {
    admin(&s, &h)?;
    Ok(Json(s.tenants()))
}

async fn create_tenant(State(s): State<Shared>, h: HeaderMap, body: Bytes) -> Result<impl IntoResponse, ApiError> {
    let c = admin(&s, &h)?;
    let req: NewTenant = parse_json(&body)?;
    let out = blocking(move || s.create_tenant(&c, req)).await?;
    Ok((StatusCode::CREATED, Json(out)))
}

async fn create_token(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(t): Path<String>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let c = admin(&s, &h)?;
    if !body.is_empty() {
        parse_json::<serde::de::IgnoredAny>(&body)?;
    }
    let out = blocking(move || s.mint_token(&c, &t)).await?;
    Ok((StatusCode::CREATED, Json(out)))
}

async fn revoke_token(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let c = admin(&s, &h)?;
    blocking(move || s.revoke_token(&c, &id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_plugins(State(s): State<Shared>, h: HeaderMap) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    Ok(Json(s.plugins(&t)))
}

async fn get_plugin(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    Ok(Json(s.plugin(&t, &name)?))
}

async fn put_plugin(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let (c, t) = tenant(&s, &h)?;
    let (status, out) = blocking(move || s.put_plugin(&c, &t, &name, &body)).await?;
    Ok((status, Json(out)))
}

async fn delete_plugin(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (c, t) = tenant(&s, &h)?;
    blocking(move || s.delete_plugin(&c, &t, &name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_files(State(s): State<Shared>, h: HeaderMap, Query(q): Params) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    let prefix = q.get("prefix").cloned();
    Ok(Json(blocking(move || s.list_files(&t, prefix.as_deref())).await?))
}

async fn get_file(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(path): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    let bytes = blocking(move || s.get_file(&t, &path)).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes))
}

async fn put_file(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(path): Path<String>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let (c, t) = tenant(&s, &h)?;
    let out = blocking(move || s.put_file(&c, &t, &path, &body)).await?;
    Ok((StatusCode::CREATED, Json(out)))
}

async fn list_pipelines(State(s): State<Shared>, h: HeaderMap) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    Ok(Json(blocking(move || s.pipelines(&t)).await?))
}

async fn get_pipeline(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    Ok(Json(blocking(move || s.pipeline(&t, &name)).await?))
}

async fn get_pipeline_file(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    let text = s.pipeline_text(&t, &name)?;
    Ok(([(header::CONTENT_TYPE, "application/toml")], text))
}

async fn put_pipeline(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
    Query(q): Params,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let (c, t) = tenant(&s, &h)?;
    let start = flag(&q, "start", true)?;
    let text =
        String::from_utf8(body.to_vec()).map_err(|_| ApiError::bad("(body)", "the pipeline file is not UTF-8"))?;
    let (status, view) = blocking(move || s.put_pipeline(&c, &t, &name, &text, start)).await?;
    Ok((status, Json(view)))
}

async fn delete_pipeline(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
    Query(q): Params,
) -> Result<impl IntoResponse, ApiError> {
    let (c, t) = tenant(&s, &h)?;
    let (state, outputs) = (flag(&q, "state", false)?, flag(&q, "outputs", false)?);
    blocking(move || s.delete_pipeline(&c, &t, &name, state, outputs)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn act(
    State(s): State<Shared>,
    h: HeaderMap,
    Path((name, action)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let (c, t) = tenant(&s, &h)?;
    let action = match action.as_str() {
        "start" => Action::Start,
        "stop" => Action::Stop,
        "pause" => Action::Pause,
        "resume" => Action::Resume,
        _ => return Err(ApiError::not_found("route")),
    };
    Ok(Json(blocking(move || s.act(&c, &t, &name, action)).await?))
}

async fn progress(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
    Query(q): Params,
) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    let (after, n) = (number(&q, "after", 0)?, number(&q, "n", limits::RECENT_PROGRESS as u64)?);
    let recent = s.progress(&t, &name)?;
    let records: Vec<serde_json::Value> = recent
        .since(after, n as usize)
        .into_iter()
        .filter_map(|(seq, r)| {
            let mut v: serde_json::Value = serde_json::from_str(&r).ok()?;
            v.as_object_mut()?.insert("seq".into(), seq.into());
            Some(v)
        })
        .collect();
    Ok(Json(serde_json::json!({ "progress": records })))
}

/// Server-sent events: the run's status as an event `state` when the stream opens and at each
/// change, and each new progress record as an event `progress`, as it is made (a run's last
/// records before the state it ends in).
async fn events(State(s): State<Shared>, h: HeaderMap, Path(name): Path<String>) -> Result<Response, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    let recent = s.progress(&t, &name)?;
    let bell = recent.follow();
    let last = recent.since(0, 1).last().map_or(0, |(s, _)| *s);
    let start = (bell, last, None, recent);
    let stream = futures_util::stream::unfold(start, |(mut bell, last, sent, recent)| async move {
        loop {
            let fresh = recent.since(last, limits::RECENT_PROGRESS);
            if let Some((seq, record)) = fresh.into_iter().next() {
                let event = Event::default().event("progress").id(seq.to_string()).data(record);
                return Some((Ok::<_, std::convert::Infallible>(event), (bell, seq, sent, recent)));
            }
            let status = recent.status();
            let now = Some((status.state, status.started_ms));
            if now != sent {
                let event = Event::default().event("state").data(serde_json::to_string(&status).unwrap_or_default());
                return Some((Ok(event), (bell, last, now, recent)));
            }
            bell.changed().await.ok()?;
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

async fn dead_letters(
    s: State<Shared>,
    h: HeaderMap,
    name: Path<String>,
    q: Params,
) -> Result<impl IntoResponse, ApiError> {
    tail(s, h, name, q, false).await
}

async fn late_events(
    s: State<Shared>,
    h: HeaderMap,
    name: Path<String>,
    q: Params,
) -> Result<impl IntoResponse, ApiError> {
    tail(s, h, name, q, true).await
}

/// The last lines the pipeline's plugins logged, `{"logs": [{"ms", "level", "stage", "message"}]}`.
async fn plugin_logs(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
    Query(q): Params,
) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    let n = number(&q, "n", 100)? as usize;
    Ok(Json(serde_json::json!({ "logs": s.plugin_logs(&t, &name, n)? })))
}

/// The last dead letters (`late`: late events), `{"dead_letters": [...]}` or `{"late_events": [...]}`.
async fn tail(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(name): Path<String>,
    Query(q): Params,
    late: bool,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    let n = number(&q, "n", 20)? as usize;
    let lines = blocking(move || s.tail(&t, &name, late, n)).await?;
    let mut body = serde_json::Map::new();
    body.insert(if late { "late_events" } else { "dead_letters" }.into(), lines.into());
    Ok(Json(body.into()))
}

/// The tenant's pipelines in the Prometheus text format: engine gauges from each pipeline's
/// last progress record, and its plugins' counters.
async fn metrics(State(s): State<Shared>, h: HeaderMap) -> Result<impl IntoResponse, ApiError> {
    let (_, t) = tenant(&s, &h)?;
    let body = blocking(move || Ok(s.metrics(&t))).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route, as `docs/openapi.json` lists it (a test holds the two to each other).
    const ROUTES: &[(&str, &str)] = &[
        ("get", "/v1/health"),
        ("get", "/v1/tenants"),
        ("post", "/v1/tenants"),
        ("post", "/v1/tenants/{tenant}/tokens"),
        ("delete", "/v1/tokens/{id}"),
        ("get", "/v1/plugins"),
        ("get", "/v1/plugins/{name}"),
        ("put", "/v1/plugins/{name}"),
        ("delete", "/v1/plugins/{name}"),
        ("get", "/v1/files"),
        ("get", "/v1/files/{path}"),
        ("put", "/v1/files/{path}"),
        ("get", "/v1/pipelines"),
        ("get", "/v1/pipelines/{name}"),
        ("put", "/v1/pipelines/{name}"),
        ("delete", "/v1/pipelines/{name}"),
        ("get", "/v1/pipelines/{name}/file"),
        ("post", "/v1/pipelines/{name}/{action}"),
        ("get", "/v1/pipelines/{name}/progress"),
        ("get", "/v1/pipelines/{name}/events"),
        ("get", "/v1/pipelines/{name}/dead-letters"),
        ("get", "/v1/pipelines/{name}/late-events"),
        ("get", "/v1/pipelines/{name}/logs"),
        ("get", "/v1/metrics"),
    ];

    /// `docs/openapi.json` lists exactly the routes served (tests/serve/client.rs calls each of them).
    #[test]
    fn the_openapi_file_lists_every_route_and_no_other() {
        let spec: serde_json::Value = serde_json::from_str(include_str!("../../../docs/openapi.json")).unwrap();
        let mut documented: Vec<(String, String)> = spec["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, ops)| ops.as_object().unwrap().keys().map(move |m| (m.clone(), path.clone())))
            .collect();
        documented.sort();
        let mut served: Vec<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
        served.sort();
        assert_eq!(documented, served);
    }

    proptest::proptest! {
        /// Whatever bytes a client sends as a JSON body, parsing names a field or succeeds; it
        /// never panics.
        #[test]
        fn any_json_body_parses_or_is_refused_with_a_field(body in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Err(e) = parse_json::<NewTenant>(&body) {
                proptest::prop_assert!(e.field.is_some());
            }
        }

        #[test]
        fn any_tenant_object_parses_or_is_refused_with_a_field(name in "\\PC{0,40}", key in "[a-z_]{1,20}", n in proptest::num::i64::ANY) {
            let body = serde_json::json!({"name": name, "quotas": {key: n}}).to_string();
            if let Err(e) = parse_json::<NewTenant>(body.as_bytes()) {
                proptest::prop_assert!(e.field.is_some());
            }
        }
    }
}
