//! A throw-away PostgreSQL server for the fence tests: Debian's `postgresql` binaries
//! (`initdb`, `pg_ctl`) in a temp dir, on a free loopback port, its socket in that dir,
//! stopped and removed on drop (a failing test included). Never the system cluster the
//! package may have created. `initdb` refuses to run as root, so as root (CI) the server
//! runs as `postgres` (the package creates it) or `nobody`. The Python suite's fixture
//! (clients/python/tests/conftest.py) does the same.
//!
//! No server binaries: [`PgServer::start`] answers `None` (the test skips, saying so)
//! unless `LEASEHOLD_REQUIRE_POSTGRES=1` or `LEASEHOLD_REQUIRE_PYTHON=1`, then it panics.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A running server; stopped (`pg_ctl stop -m immediate`) and its dir removed on drop.
pub struct PgServer {
    bindir: PathBuf,
    root: tempfile::TempDir,
    user: Option<(u32, u32)>,
    pub port: u16,
}

/// The newest `/usr/lib/postgresql/<n>/bin` holding `initdb`.
fn bindir() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let n: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((n, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b)
}

/// (uid, gid) of the first of `names` in /etc/passwd.
fn user_ids(names: &[&str]) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    names.iter().find_map(|name| {
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == *name)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
    })
}

fn required() -> bool {
    ["LEASEHOLD_REQUIRE_POSTGRES", "LEASEHOLD_REQUIRE_PYTHON"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| x == "1"))
}

impl PgServer {
    /// Starts a server, or `None` when PostgreSQL is not installed (and not required).
    pub fn start() -> Option<PgServer> {
        let Some(bindir) = bindir() else {
            let msg = "PostgreSQL server binaries not found (apt-get install -y postgresql)";
            assert!(!required(), "{msg}");
            eprintln!("skipped: {msg}");
            return None;
        };
        // SAFETY: geteuid has no preconditions.
        let user = (unsafe { libc::geteuid() } == 0).then(|| {
            user_ids(&["postgres", "nobody"])
                .expect("running as root and no postgres or nobody user")
        });
        let root = tempfile::Builder::new()
            .prefix("leasehold-pg-")
            .tempdir()
            .unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(root.path(), Some(uid), Some(gid)).unwrap();
        }
        let port = leasehold_proc_cluster::free_port().port();
        let server = PgServer {
            bindir,
            root,
            user,
            port,
        };
        let data = server.data();
        server.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            server.root.path().display()
        );
        let log = server.root.path().join("pg.log").display().to_string();
        server.run(
            "pg_ctl",
            &[
                "-D", &data, "-o", &opts, "-l", &log, "-w", "-t", "60", "start",
            ],
        );
        Some(server)
    }

    /// A `tokio-postgres` connection string for the server's `postgres` database.
    pub fn dsn(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=5",
            self.port
        )
    }

    fn data(&self) -> String {
        self.root.path().join("data").display().to_string()
    }

    fn command(&self, tool: &str) -> Command {
        let mut cmd = Command::new(self.bindir.join(tool));
        cmd.current_dir(self.root.path());
        if let Some((uid, gid)) = self.user {
            // As root, std also drops the supplementary groups (setgroups(0)).
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = self
            .command(tool)
            .args(args)
            .output()
            .expect("running a PostgreSQL tool");
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.root.path().join("pg.log")).unwrap_or_default()
        );
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "-w", "-t", "60", "stop"])
            .output();
    }
}
