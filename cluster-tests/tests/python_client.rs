//! The Python client's suite (`clients/python/`, issue 34) from `cargo test`, so the
//! README's one test command runs it too: `clients/python/run-tests.sh` installs the
//! package with its test dependencies into a virtualenv of its own
//! (`target/python-venv`), type-checks it with `mypy --strict` and runs its pytest suite
//! against real three-node clusters of this build's binary and a throw-away PostgreSQL.
//!
//! Needs `python3` with `venv`, the package index (pip) and Debian's `postgresql`.
//! Without Python or PostgreSQL the test prints why and passes, unless
//! `LEASEHOLD_REQUIRE_PYTHON=1` (CI sets it), when it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use leasehold_cluster_tests::fixture::leasehold_bin;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Why the suite cannot run here, if it cannot.
fn missing_tools() -> Option<String> {
    let python = Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .output();
    if !python.is_ok_and(|o| o.status.success()) {
        return Some("python3 with venv and ensurepip".into());
    }
    let initdb = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .any(|v| v.path().join("bin/initdb").exists());
    (!initdb).then(|| "PostgreSQL's server (apt-get install -y postgresql)".into())
}

#[test]
fn the_python_client_suite_passes_against_this_build() {
    if let Some(what) = missing_tools() {
        let required = std::env::var("LEASEHOLD_REQUIRE_PYTHON").as_deref() == Ok("1");
        assert!(
            !required,
            "LEASEHOLD_REQUIRE_PYTHON=1 but {what} is missing"
        );
        eprintln!("skipped: the Python client's suite needs {what}");
        return;
    }
    let root = root();
    let venv = root.join("target/python-venv");
    if !venv.join("bin/python").exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("running python3 -m venv");
        assert!(made.success(), "python3 -m venv {}", venv.display());
    }
    let bin = leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test"));
    let status = Command::new("bash")
        .arg(root.join("clients/python/run-tests.sh"))
        .env("LEASEHOLD_BIN", &bin)
        .env("PYTHON", venv.join("bin/python"))
        .status()
        .expect("running clients/python/run-tests.sh");
    assert!(
        status.success(),
        "the Python client's suite failed (output above)"
    );
}
