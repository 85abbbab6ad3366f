//! A real PostgreSQL server for a test, from Debian's packages (`cargo xtask setup` installs
//! them): its own cluster in a temporary directory, on a free loopback port, with a user whose
//! password is checked (SCRAM over TCP), stopped and started again for outage tests, and read
//! back with `psql`. PostgreSQL refuses to run as root, so under root the server runs as the
//! `postgres` user the package creates.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The user and database the tests connect as; the password is in the fixture's password file.
pub const USER: &str = "weir";
pub const DATABASE: &str = "shop";
const PASSWORD: &str = "correct horse battery staple";

pub struct Postgres {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    pub port: u16,
    /// `host=... port=... dbname=... user=...`: a sink's `connection` file.
    pub connection: PathBuf,
    /// The password, for a sink's `password_file`.
    pub password_file: PathBuf,
}

/// PostgreSQL's programs: `pg_config --bindir`, else the newest `/usr/lib/postgresql/*/bin`.
fn bin() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).filter(|b| b.join("initdb").exists()).collect())
        .unwrap_or_default();
    found.sort();
    found.pop().expect("PostgreSQL's server is missing: run `cargo xtask setup`, which installs Debian's postgresql")
}

fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Postgres {
    pub fn start() -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        let (data, bin, port) = (dir.path().join("data"), bin(), free_port());
        let pwfile = dir.path().join("initdb-password");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        if as_root() {
            let (uid, gid) = postgres_ids();
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).unwrap();
        }
        let pg = Postgres {
            connection: dir.path().join("pg.conf"),
            password_file: dir.path().join("pg.password"),
            _dir: dir,
            data,
            bin,
            port,
        };
        pg.server(&[
            "initdb",
            "-D",
            pg.data.to_str().unwrap(),
            "-U",
            USER,
            "--pwfile",
            pwfile.to_str().unwrap(),
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
            "--no-locale",
        ]);
        pg.up();
        std::fs::write(&pg.connection, format!("host=127.0.0.1 port={port} dbname={DATABASE} user={USER}\n")).unwrap();
        std::fs::write(&pg.password_file, format!("{PASSWORD}\n")).unwrap();
        let out = pg.psql_in("postgres", &format!("CREATE DATABASE {DATABASE}"));
        assert!(out.status.success(), "createdb: {}", String::from_utf8_lossy(&out.stderr));
        pg
    }

    /// Starts the server (`pg_ctl -w` returns once it takes connections).
    pub fn up(&self) {
        let opts = format!("-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''", self.port);
        let log = self.data.parent().unwrap().join("server.log");
        self.server(&[
            "pg_ctl",
            "-D",
            self.data.to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
            "-o",
            &opts,
            "-w",
            "start",
        ]);
    }

    /// Stops the server at once, as a crash would (no shutdown checkpoint).
    pub fn down(&self) {
        self.server(&["pg_ctl", "-D", self.data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
    }

    /// Runs one of the server's programs, as the `postgres` user under root.
    fn server(&self, args: &[&str]) {
        let program = self.bin.join(args[0]);
        let mut c = if as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let out = c.args(&args[1..]).current_dir(self.data.parent().unwrap()).output().unwrap();
        assert!(out.status.success(), "{}: {}", args[0], String::from_utf8_lossy(&out.stderr));
    }

    /// `psql` on the test database: the output of `sql`, rows as `|`-separated lines.
    pub fn psql(&self, sql: &str) -> String {
        let out = self.psql_in(DATABASE, sql);
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn psql_in(&self, db: &str, sql: &str) -> Output {
        Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER, "-d", db])
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            // The password by the environment, never on the command line.
            .env("PGPASSWORD", PASSWORD)
            .output()
            .unwrap()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let stop = |c: &mut Command| c.args(["-D", self.data.to_str().unwrap(), "-m", "immediate", "stop"]).output();
        let _ = if as_root() {
            stop(Command::new("runuser").args(["-u", "postgres", "--"]).arg(self.bin.join("pg_ctl")))
        } else {
            stop(&mut Command::new(self.bin.join("pg_ctl")))
        };
    }
}

/// The uid and gid of the `postgres` user Debian's package makes.
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().unwrap();
        assert!(out.status.success(), "no postgres user: run `cargo xtask setup`, which installs Debian's postgresql");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// The file a connection or password is in, for tests that write their own.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
