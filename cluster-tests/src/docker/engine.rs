//! The `docker` command line, as the container cluster runs it: every call bounded
//! ([`DOCKER_BOUND`]), failures typed ([`DockerError`]); the labels put on every
//! container, volume and network a test creates ([`LABEL`], [`PID_LABEL`]), so a later
//! run removes what a crashed one left ([`remove_leftovers`]); and the check that decides
//! whether the container tests can run here ([`unavailable`]).
//! Imports std, tokio and libc (the kill of a `docker` call past its bound) only.

use std::process::Stdio;
use std::time::Duration;

/// Bound on one `docker` call (a `restart -t 30` is the longest).
pub const DOCKER_BOUND: Duration = Duration::from_secs(60);
/// On everything a container test creates.
pub const LABEL: &str = "org.leasehold.test=hosts";
/// The creating process's pid: leftovers are what no living test process owns.
pub const PID_LABEL: &str = "org.leasehold.test.pid";

/// Why a `docker` call failed.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("running `docker {args}`: {err}")]
    Spawn { args: String, err: std::io::Error },
    #[error("`docker {args}` did not finish within {DOCKER_BOUND:?}")]
    Timeout { args: String },
    #[error("`docker {args}` failed ({status}): {stderr}")]
    Failed {
        args: String,
        status: String,
        stderr: String,
    },
}

fn finished(args: &[&str], out: std::process::Output) -> Result<String, DockerError> {
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    Err(DockerError::Failed {
        args: args.join(" "),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    })
}

/// `docker ARGS…`: its trimmed stdout, or why it failed; killed after [`DOCKER_BOUND`].
pub async fn docker(args: &[&str]) -> Result<String, DockerError> {
    let child = tokio::process::Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(DOCKER_BOUND, child).await {
        Err(_) => Err(DockerError::Timeout {
            args: args.join(" "),
        }),
        Ok(Err(err)) => Err(DockerError::Spawn {
            args: args.join(" "),
            err,
        }),
        Ok(Ok(out)) => finished(args, out),
    }
}

/// [`docker`] for where no runtime is at hand (a `Drop`, the skip check): the same
/// bound, kept by a thread that waits for the child while this one waits on a channel.
pub fn docker_blocking(args: &[&str]) -> Result<String, DockerError> {
    let spawn_err = |err| DockerError::Spawn {
        args: args.join(" "),
        err,
    };
    let child = std::process::Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_err)?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(DOCKER_BOUND) {
        Ok(out) => finished(args, out.map_err(spawn_err)?),
        Err(_) => {
            // SAFETY: kill(2) of our child, not reaped yet (its waiter is still waiting).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            Err(DockerError::Timeout {
                args: args.join(" "),
            })
        }
    }
}

/// Why the container tests cannot run here (`None`: they can): no Docker daemon
/// answers, the image is missing, or we are not root (the peer secret must be given to
/// the image's uid 10001, as `deploy/make-secrets.sh` does).
pub fn unavailable(image: &str, built: &std::path::Path) -> Option<String> {
    if let Err(e) = docker_blocking(&["info", "--format", "{{.ServerVersion}}"]) {
        return Some(format!("no Docker daemon answers ({e})"));
    }
    if docker_blocking(&["image", "inspect", "--format", "{{.Id}}", image]).is_err() {
        return Some(format!(
            "image {image} is missing (make it with deploy/build-image.sh or deploy/smoke.sh)"
        ));
    }
    if let Some(stale) = older_than(image, built) {
        return Some(stale);
    }
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: the peer secret must be chowned to uid 10001".into());
    }
    None
}

/// Why `image` cannot stand for the build under test, if it was made before `built`
/// (the binary the tests were built with) was: it would hold an older binary. `None`
/// also when either time cannot be read (the run then uses the image as it is).
fn older_than(image: &str, built: &std::path::Path) -> Option<String> {
    let created = docker_blocking(&["image", "inspect", "--format", "{{.Created}}", image]).ok()?;
    let out = std::process::Command::new("date")
        .args(["-u", "-d", created.trim(), "+%s"])
        .output()
        .ok()?;
    let created_s: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    let modified = std::fs::metadata(built).ok()?.modified().ok()?;
    let built_s = modified
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    (created_s < built_s).then(|| {
        format!(
            "image {image} is older than this build ({}): make it again with \
             deploy/build-image.sh",
            built.display()
        )
    })
}

/// Whether process `pid` still runs (its `/proc` entry exists).
fn alive(pid: &str) -> bool {
    std::path::Path::new("/proc").join(pid).exists()
}

/// Removes containers, then volumes and networks, labelled [`LABEL`] whose
/// [`PID_LABEL`] names no living process: what a crashed or killed run left.
pub fn remove_leftovers() {
    let filter = format!("label={LABEL}");
    let kinds: [(&[&str], &[&str], &str); 3] = [
        (&["ps", "-a"], &["rm", "-f", "-v"], "ID"),
        (&["volume", "ls"], &["volume", "rm", "-f"], "Name"),
        (&["network", "ls"], &["network", "rm"], "ID"),
    ];
    for (list, remove, key) in kinds {
        let fmt = format!("{{{{.{key}}}}} {{{{.Label \"{PID_LABEL}\"}}}}");
        let mut args = list.to_vec();
        args.extend(["--filter", &filter, "--format", &fmt]);
        let Ok(out) = docker_blocking(&args) else {
            continue;
        };
        for line in out.lines() {
            let mut parts = line.split_whitespace();
            let (Some(id), pid) = (parts.next(), parts.next().unwrap_or("")) else {
                continue;
            };
            if !alive(pid) {
                let mut rm = remove.to_vec();
                rm.push(id);
                let _ = docker_blocking(&rm);
            }
        }
    }
}
