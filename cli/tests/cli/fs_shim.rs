//! An `LD_PRELOAD` shim for the `leasehold` processes these tests start: it records the
//! directory-entry changes (mkdir, file creation, rename, unlink) and fsyncs the process
//! makes, and can fail fsync/fdatasync with EIO on files whose path contains a given
//! string once a trigger file exists. The node's own code keeps its one production path:
//! the fault comes from below it, as from a failing disk (issue 19).
//!
//! Built here with the system C compiler (`cc`, which Rust's linker on Linux needs
//! anyway), once per test binary run. The process reads:
//! - `LH_SHIM_TRACE`: the file to append `op path` lines to (`mkdir`, `create`,
//!   `rename`, `unlink`, `fsync`, `fdatasync`, `fail`); only calls that succeeded, and
//!   `fail` for each one the shim failed;
//! - `LH_SHIM_FAIL_PATH`, `LH_SHIM_FAIL_TRIGGER`: once the trigger file exists, every
//!   fsync/fdatasync on a file whose path contains the fail path returns EIO.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SHIM_C: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

typedef int (*open_fn)(const char *, int, ...);

static void trace(const char *op, const char *path) {
    const char *file = getenv("LH_SHIM_TRACE");
    if (!file) return;
    static open_fn real_open;
    if (!real_open) real_open = (open_fn)dlsym(RTLD_NEXT, "open");
    int fd = real_open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    char line[PATH_MAX + 32];
    int n = snprintf(line, sizeof line, "%s %s\n", op, path);
    if (n > 0) { ssize_t w = write(fd, line, (size_t)n); (void)w; }
    close(fd);
}

static int fd_path(int fd, char *out) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n < 0) return -1;
    out[n] = 0;
    return 0;
}

static int must_fail(const char *path) {
    const char *want = getenv("LH_SHIM_FAIL_PATH");
    const char *trigger = getenv("LH_SHIM_FAIL_TRIGGER");
    return want && trigger && strstr(path, want) && access(trigger, F_OK) == 0;
}

static int do_sync(const char *name, int fd) {
    static int (*real_fsync)(int), (*real_fdatasync)(int);
    if (!real_fsync) real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (!real_fdatasync) real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    char path[PATH_MAX];
    if (fd_path(fd, path) != 0) path[0] = 0;
    if (path[0] && must_fail(path)) { trace("fail", path); errno = EIO; return -1; }
    int r = strcmp(name, "fsync") == 0 ? real_fsync(fd) : real_fdatasync(fd);
    if (r == 0 && path[0]) trace(name, path);
    return r;
}

int fsync(int fd) { return do_sync("fsync", fd); }
int fdatasync(int fd) { return do_sync("fdatasync", fd); }

static int do_open(const char *sym, const char *path, int flags, mode_t mode) {
    open_fn real = (open_fn)dlsym(RTLD_NEXT, sym);
    int existed = (flags & O_CREAT) ? access(path, F_OK) == 0 : 1;
    int fd = real(path, flags, mode);
    if (fd >= 0 && !existed) {
        char abs[PATH_MAX];
        if (fd_path(fd, abs) == 0) trace("create", abs);
    }
    return fd;
}

int open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }
    return do_open("open", path, flags, mode);
}
int open64(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }
    return do_open("open64", path, flags, mode);
}

int mkdir(const char *path, mode_t mode) {
    static int (*real)(const char *, mode_t);
    if (!real) real = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    int r = real(path, mode);
    if (r == 0) { char abs[PATH_MAX]; if (realpath(path, abs)) trace("mkdir", abs); }
    return r;
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int r = real(from, to);
    if (r == 0) { char abs[PATH_MAX]; if (realpath(to, abs)) trace("rename", abs); }
    return r;
}

int unlink(const char *path) {
    static int (*real)(const char *);
    if (!real) real = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    char abs[PATH_MAX];
    int known = realpath(path, abs) != NULL;
    int r = real(path);
    if (r == 0 && known) trace("unlink", abs);
    return r;
}
"#;

/// The shim's shared object, built on first use.
pub fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("leasehold-fs-shim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("shim dir");
        let src = dir.join("shim.c");
        let so = dir.join("shim.so");
        std::fs::write(&src, SHIM_C).expect("writing the shim source");
        let out = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&so)
            .arg(&src)
            .arg("-ldl")
            .output()
            .expect("running cc (the C compiler Rust links with) to build the fs shim");
        assert!(
            out.status.success(),
            "building the fs shim failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        so
    })
}

/// One traced call: its op and the absolute path it was on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub op: String,
    pub path: PathBuf,
}

/// The trace file's calls, in order (none if the process wrote none).
pub fn read_trace(file: &Path) -> Vec<Op> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(op, path)| Op {
            op: op.to_owned(),
            path: PathBuf::from(path),
        })
        .collect()
}

/// The changes to directory entries under `root` that no later fsync of the directory
/// holding them made durable: `(change, directory)`.
pub fn unsynced_entries(trace: &[Op], root: &Path) -> Vec<(Op, PathBuf)> {
    let mut out = Vec::new();
    for (i, op) in trace.iter().enumerate() {
        let changes_entry = matches!(op.op.as_str(), "mkdir" | "create" | "rename" | "unlink");
        if !changes_entry || !op.path.starts_with(root) {
            continue;
        }
        let Some(dir) = op.path.parent() else {
            continue;
        };
        let synced = trace[i + 1..]
            .iter()
            .any(|later| later.op == "fsync" && later.path == dir);
        if !synced {
            out.push((op.clone(), dir.to_path_buf()));
        }
    }
    out
}
