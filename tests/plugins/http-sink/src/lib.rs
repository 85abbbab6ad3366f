//! POSTs each batch's rows (JSON lines) to `config.authority` + `config.path` over plain HTTP
//! with `wasi:http`, the batch id in the path. The host allows only the authorities a stage's
//! `grants.http` lists; the tests check both sides of that.

use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use weir_guest::{Config, Delivery, PluginError, Rows, Sink, export_plugin};

struct HttpSink {
    authority: String,
    path: String,
}

fn io(what: &str, e: impl std::fmt::Debug) -> PluginError {
    PluginError::Io(format!("{what}: {e:?}"))
}

impl HttpSink {
    fn post(&self, path: &str, body: &[u8]) -> Result<u16, PluginError> {
        // A length up front, so the request is not chunked.
        let headers = Fields::from_list(&[("content-length".to_string(), body.len().to_string().into_bytes())])
            .map_err(|e| io("headers", e))?;
        let req = OutgoingRequest::new(headers);
        req.set_method(&Method::Post).map_err(|e| io("method", e))?;
        req.set_scheme(Some(&Scheme::Http)).map_err(|e| io("scheme", e))?;
        req.set_authority(Some(&self.authority)).map_err(|e| io("authority", e))?;
        req.set_path_with_query(Some(path)).map_err(|e| io("path", e))?;
        let out = req.body().map_err(|e| io("body", e))?;
        // Send first, then stream the body: the body's buffer drains only once the request is
        // on its way.
        let pending = outgoing_handler::handle(req, None).map_err(|e| io("request", e))?;
        // A refused request closes the body stream: the response then says why, so a write
        // error is reported only if the response does not explain it.
        let written = (|| {
            let stream = out.write().map_err(|e| io("body stream", e))?;
            for chunk in body.chunks(4096) {
                stream.blocking_write_and_flush(chunk).map_err(|e| io("write", e))?;
            }
            drop(stream);
            OutgoingBody::finish(out, None).map_err(|e| io("finish", e))
        })();
        pending.subscribe().block();
        let response = pending
            .get()
            .ok_or_else(|| io("response", "none"))?
            .map_err(|e| io("response", e))?
            .map_err(|e| io("request", e))?;
        written?;
        Ok(response.status())
    }
}

impl Sink for HttpSink {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(HttpSink {
            authority: config.get("authority")?.ok_or_else(|| PluginError::InvalidConfig("authority".into()))?,
            path: config.get("path")?.unwrap_or_else(|| "/batches".into()),
        })
    }

    fn write_batch(&self, d: &Delivery<'_>, rows: Rows<'_>) -> Result<(), PluginError> {
        let mut body = Vec::new();
        for row in rows.iter() {
            body.extend_from_slice(row);
            body.push(b'\n');
        }
        match self.post(&format!("{}/{}", self.path, d.batch_id), &body)? {
            200..=299 => Ok(()),
            status => Err(PluginError::Io(format!("POST answered {status}"))),
        }
    }
}

export_plugin!(sink: HttpSink);
