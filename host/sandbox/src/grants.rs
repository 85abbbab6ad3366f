//! Capabilities a plugin may be granted, each validated and applied here and nowhere else.
//!
//! Everything is denied unless the stage's `grants` table says otherwise: no files, no network,
//! no environment variables; clocks read as the Unix epoch and never move, and randomness comes
//! from a fixed seed, so that a plugin's output depends only on its input (a batch re-run after a
//! crash must yield the same rows).
//!
//! Three steps, at three times:
//! - [`Grants::validate`], with the pipeline file: the form of each grant, nothing looked up;
//! - [`Grants::resolve`], at start-up: environment values read, network names resolved,
//!   writable directories created;
//! - [`Resolved::apply`], for each new instance: the WASI context that enforces them.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use wasmtime_wasi::{FsPerms, WasiCtxBuilder};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::PluginError;

/// What a stage's `grants` table asks for, as written.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    pub dirs: Vec<DirGrant>,
    /// Names of environment variables to pass through (their values are read at start-up).
    pub env: Vec<String>,
    /// The host's wall and monotonic clocks.
    pub clocks: bool,
    /// The host's random source.
    pub random: bool,
    /// `host:port` addresses the plugin may open TCP connections to (resolved at start-up).
    pub network: Vec<String>,
    /// `host:port` authorities the plugin may send HTTP requests to (`wasi:http`).
    pub http: Vec<String>,
    /// The process's standard output (validated to a sink; other stages' stdout goes nowhere).
    pub stdout: bool,
    /// `grants.registry = true`: the pipeline's `[registry]`, which the stage reaches through
    /// the `registry` interface (`registry.rs`).
    pub registry: Option<weir_schema::RegistryConfig>,
}

/// A host directory the plugin may see, at `guest` inside the sandbox.
#[derive(Debug, Clone)]
pub struct DirGrant {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

/// A grant that is not well formed: the key under `grants` (e.g. `http[0]`) and what to write.
#[derive(Debug, PartialEq, Eq)]
pub struct BadGrant {
    pub key: String,
    pub message: String,
}

/// Grants as a running stage holds them: looked up and ready to apply to each new instance.
#[derive(Debug, Clone)]
pub struct Resolved {
    grants: Grants,
    env: Vec<(String, String)>,
    network: Vec<SocketAddr>,
    /// The process's client of the granted registry.
    pub(super) registry: Option<std::sync::Arc<weir_schema::Registry>>,
}

impl Grants {
    /// Checks the form of every grant, without looking anything up.
    pub fn validate(&self) -> Result<(), BadGrant> {
        for (i, d) in self.dirs.iter().enumerate() {
            if !d.guest.starts_with('/') {
                return Err(BadGrant {
                    key: format!("dirs[{i}].guest"),
                    message: format!("`{}`: must be an absolute path inside the sandbox, e.g. \"/out\"", d.guest),
                });
            }
        }
        for (i, name) in self.env.iter().enumerate() {
            if name.is_empty() || name.contains('=') {
                return Err(BadGrant { key: format!("env[{i}]"), message: format!("`{name}` is not a variable name") });
            }
        }
        for (field, list, example) in
            [("network", &self.network, "db.internal:5432"), ("http", &self.http, "api.example.com:443")]
        {
            for (i, a) in list.iter().enumerate() {
                let ok = a
                    .rsplit_once(':')
                    .is_some_and(|(host, port)| !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok());
                if !ok {
                    return Err(BadGrant {
                        key: format!("{field}[{i}]"),
                        message: format!("`{a}`: write \"host:port\", e.g. \"{example}\""),
                    });
                }
            }
        }
        Ok(())
    }

    /// What the grants name on this machine, looked up once at start-up: the environment
    /// variables' values and the network addresses. Writable directories are created, as a file
    /// sink would create its file.
    pub fn resolve(&self, stage: &str) -> Result<Resolved, PluginError> {
        let bad = |what: String, message: String| PluginError::Grant { stage: stage.to_string(), what, message };
        for d in self.dirs.iter().filter(|d| d.writable) {
            std::fs::create_dir_all(&d.host)
                .map_err(|e| bad(format!("directory {}", d.host.display()), e.to_string()))?;
        }
        let mut env = Vec::with_capacity(self.env.len());
        for name in &self.env {
            let value = std::env::var(name).map_err(|_| {
                bad(format!("environment variable {name} (grants.env)"), "it is not set in Weir's environment".into())
            })?;
            env.push((name.clone(), value));
        }
        let mut network = Vec::new();
        for a in &self.network {
            use std::net::ToSocketAddrs;
            let addrs =
                a.to_socket_addrs().map_err(|e| bad(format!("network address {a} (grants.network)"), e.to_string()))?;
            network.extend(addrs);
        }
        let registry = match &self.registry {
            Some(c) => Some(
                weir_schema::Registry::shared(c)
                    .map_err(|e| bad(format!("schema registry {} (grants.registry)", c.url), e.to_string()))?,
            ),
            None => None,
        };
        Ok(Resolved { grants: self.clone(), env, network, registry })
    }
}

/// One of the host's own places a grant must stay clear of.
pub struct Own<'a> {
    /// What it is, for the error: "the checkpoint", "the dead-letter file", "flow `b`'s
    /// checkpoint", ...
    pub what: std::borrow::Cow<'a, str>,
    pub path: &'a Path,
    /// Any grant near it is refused (the checkpoint, the component cache: a read grant would
    /// show a plugin other pipelines' state or code); otherwise only a writable grant over it
    /// (a side-output file, where a planted link would redirect the host's writes).
    pub any_grant: bool,
}

impl Grants {
    /// Refuses a directory grant that reaches one of the host's own places: contains it, or
    /// lies inside it.
    pub fn keep_clear_of(&self, stage: &str, own: &[Own]) -> Result<(), PluginError> {
        for (i, d) in self.dirs.iter().enumerate() {
            let dir = resolved(&d.host);
            for o in own.iter().filter(|o| o.any_grant || d.writable) {
                // Where the path leads, and where its last component itself lies: a link planted
                // there leads elsewhere, but the host's file is the link's place (it opens its own
                // files without following a last-component link).
                let places = [resolved(o.path), in_place(o.path)];
                if places.iter().any(|path| path.starts_with(&dir) || (o.any_grant && dir.starts_with(path))) {
                    return Err(PluginError::Grant {
                        stage: stage.to_string(),
                        what: format!("directory {} (grants.dirs[{i}])", d.host.display()),
                        message: format!(
                            "it reaches {} ({}), which only the host may touch; grant a directory of its own",
                            o.what,
                            o.path.display()
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}

/// A path with its longest existing prefix canonical (links resolved), the rest as written: what
/// it will be when created.
fn resolved(p: &Path) -> PathBuf {
    let mut existing = p;
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(c, |acc: PathBuf, part| acc.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
        }
    }
}

/// A path with its directory resolved and its last component as written.
fn in_place(p: &Path) -> PathBuf {
    match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) => {
            resolved(if parent.as_os_str().is_empty() { Path::new(".") } else { parent }).join(name)
        }
        _ => resolved(p),
    }
}

/// The clocks a plugin without `grants.clocks` sees: the epoch, forever.
struct Frozen;

impl wasmtime_wasi::HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for Frozen {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

impl Resolved {
    /// Sets up a new instance's WASI context with exactly these grants.
    pub fn apply(&self, wasi: &mut WasiCtxBuilder, stage: &str) -> Result<(), PluginError> {
        let g = &self.grants;
        if !g.clocks {
            wasi.wall_clock(Frozen).monotonic_clock(Frozen);
        }
        if !g.random {
            use rand::SeedableRng;
            wasi.secure_random(rand::rngs::StdRng::seed_from_u64(0))
                .insecure_random(rand::rngs::StdRng::seed_from_u64(1))
                .insecure_random_seed(0);
        }
        wasi.envs(&self.env);
        if g.stdout {
            wasi.inherit_stdout();
        }
        if !self.network.is_empty() {
            let allowed = self.network.clone();
            wasi.allow_tcp(true).socket_addr_check(move |addr, what| {
                // A client socket may be bound to an ephemeral local port first (CPython's and
                // wasi-libc's connect do): that is part of connecting, not a way to any address.
                let ephemeral = matches!(what, wasmtime_wasi::sockets::SocketAddrUse::TcpBind)
                    && addr.ip().is_unspecified()
                    && addr.port() == 0;
                let ok = ephemeral || allowed.contains(&addr);
                Box::pin(async move { ok })
            });
        }
        for d in &g.dirs {
            let perms = if d.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            wasi.preopened_dir(&d.host, &d.guest, perms).map_err(|e| PluginError::Grant {
                stage: stage.to_string(),
                what: format!("directory {}", d.host.display()),
                message: e.to_string(),
            })?;
        }
        Ok(())
    }

    /// The outbound-HTTP gate for a new instance.
    pub fn http(&self) -> HttpAllowList {
        HttpAllowList(self.grants.http.clone())
    }
}

/// Outbound HTTP is denied unless the request's authority is on the stage's `grants.http`.
pub struct HttpAllowList(Vec<String>);

impl WasiHttpHooks for HttpAllowList {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>),
                    HttpError,
                >,
            > + Send,
    > {
        drop(fut);
        // Compared as host:port, the port filled in from the scheme when the request has none.
        let uri = request.uri();
        let port = uri.port_u16().unwrap_or(if uri.scheme() == Some(&http::uri::Scheme::HTTPS) { 443 } else { 80 });
        let authority = format!("{}:{port}", uri.host().unwrap_or_default());
        if !self.0.contains(&authority) {
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (res, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((res.map(BodyExt::boxed_unsync), Box::new(io) as Box<dyn Future<Output = _> + Send>))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_checked_without_looking_anything_up() {
        let ok = Grants {
            dirs: vec![DirGrant { host: "out".into(), guest: "/out".into(), writable: false }],
            env: vec!["PATH".into()],
            network: vec!["no-such-host.invalid:5432".into()],
            http: vec!["api.example.com:443".into()],
            ..Grants::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        let bad = |g: Grants| g.validate().unwrap_err().key;
        assert_eq!(bad(Grants { http: vec!["https://x:1/".into()], ..ok.clone() }), "http[0]");
        assert_eq!(bad(Grants { network: vec!["x".into()], ..ok.clone() }), "network[0]");
        assert_eq!(bad(Grants { env: vec!["A=B".into()], ..ok.clone() }), "env[0]");
        let dirs = vec![DirGrant { host: "o".into(), guest: "out".into(), writable: false }];
        assert_eq!(bad(Grants { dirs, ..ok.clone() }), "dirs[0].guest");
        let e = ok.resolve("s").unwrap_err().to_string();
        assert!(e.contains("no-such-host.invalid"), "{e}");
    }

    #[test]
    fn a_grant_may_not_reach_the_host_s_own_places() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let grant = |host: &Path, writable| Grants {
            dirs: vec![DirGrant { host: host.to_path_buf(), guest: "/g".into(), writable }],
            ..Grants::default()
        };
        let checkpoint = dir.path().join("cp");
        let dead = out.join("dead-letters.jsonl");
        let own = [
            Own { what: "the checkpoint".into(), path: &checkpoint, any_grant: true },
            Own { what: "the dead-letter file".into(), path: &dead, any_grant: false },
        ];
        let e = grant(&out, true).keep_clear_of("s", &own).unwrap_err().to_string();
        assert!(e.contains("the dead-letter file") && e.contains("grant a directory of its own"), "{e}");
        assert!(grant(&out, false).keep_clear_of("s", &own).is_ok(), "reading beside a side output is harmless");
        assert!(grant(dir.path(), false).keep_clear_of("s", &own).is_err(), "any grant over the checkpoint");
        assert!(grant(&checkpoint.join("state"), false).keep_clear_of("s", &own).is_err(), "or inside it");
        assert!(grant(&dir.path().join("elsewhere"), true).keep_clear_of("s", &own).is_ok());
        // A link to the checkpoint is the checkpoint.
        std::fs::create_dir_all(&checkpoint).unwrap();
        let alias = dir.path().join("alias");
        std::os::unix::fs::symlink(&checkpoint, &alias).unwrap();
        assert!(grant(&alias, false).keep_clear_of("s", &own).is_err());
    }
}
