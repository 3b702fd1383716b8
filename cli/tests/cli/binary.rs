//! The `leasehold` binary run from a test: a command that inherits nothing of the test's
//! own environment that would steer it (endpoints, token, TLS CA, log filter), run to
//! completion within a bound, its output captured.
//!
//! May import: std, tokio, serde_json.

use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

/// What a finished `leasehold` run printed, and its exit code (-1 if a signal ended it).
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// The run succeeded and printed one JSON value; returns it.
    #[track_caller]
    pub fn json(&self) -> Value {
        self.json_for("leasehold")
    }

    /// [`Out::json`], naming `what` ran in the failure message.
    #[track_caller]
    pub fn json_for(&self, what: &str) -> Value {
        assert_eq!(
            self.code, 0,
            "{what}: stdout={:?} stderr={:?}",
            self.stdout, self.stderr
        );
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("{what}: not one JSON value ({e}): {:?}", self.stdout))
    }
}

impl From<std::process::Output> for Out {
    fn from(out: std::process::Output) -> Out {
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// `leasehold args…`, killed if dropped, with `RUST_LOG`, `LEASEHOLD_ENDPOINTS`,
/// `LEASEHOLD_TOKEN` and `LEASEHOLD_TLS_CA` removed (a caller sets what it needs).
pub fn leasehold<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("LEASEHOLD_ENDPOINTS")
        .env_remove("LEASEHOLD_TOKEN")
        .env_remove("LEASEHOLD_TLS_CA")
        .kill_on_drop(true);
    cmd
}

/// Runs `cmd` to its end; panics if it takes longer than `limit` or cannot start.
pub async fn run(mut cmd: Command, limit: Duration) -> Out {
    let args: Vec<_> = cmd.as_std().get_args().map(|a| a.to_owned()).collect();
    tokio::time::timeout(limit, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("leasehold {args:?} did not finish within {limit:?}"))
        .expect("running leasehold")
        .into()
}
