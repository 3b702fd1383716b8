//! The dashboard in a real headless Chromium (issue 8 part 4), driven over the W3C
//! WebDriver HTTP protocol by chromedriver, with plain reqwest + serde_json.
//!
//! It opens `/ui` on a follower of an in-process three-node cluster and waits (bounded
//! polls of the rendered DOM) for three members and a claimed job with its owner and
//! generation, completes the job through the API and waits for the row to say so,
//! fences off a stale completion and waits for it in the feed, then saves a screenshot
//! to `<target>/ui-artifacts/dashboard.png`.
//!
//! The lifecycle (issue 31 item 6), on a cluster with an auth file: a reader sees a
//! scheduled job's due time and priority, a leased job's progress and a failed job's
//! error, as text; the queue's dead-letter view lists the failed jobs with their errors;
//! a reader's Redrive is refused and the page shows the 403; an operator's Retry and
//! Redrive make the jobs pending and its Cancel cancels a pending job and asks a leased
//! one to stop, each read back through the API. Clicks and typing are WebDriver's own
//! (real input events). `<target>/ui-artifacts/dashboard-lifecycle.png` is its page.
//!
//! The event feed (issue 32 item 5), with a reader token: the feed starts at the
//! cluster's `event_seq` and shows each event once, newest first, with no gap; its queue
//! filter narrows it; a job claimed, expired, claimed again and completed draws two
//! lanes (expired, completed) with its submission as a marker; the throughput chart
//! counts the claims, the expiry and the completion; the feed's calls failing (as a
//! lost network) and coming back loses and repeats nothing.
//! `<target>/ui-artifacts/dashboard-events.png` is its page.
//!
//! Needs Debian's `chromium` and `chromium-driver`. Without them the test prints a skip
//! notice and passes, unless `LEASEHOLD_REQUIRE_BROWSER=1` (CI sets it), when it fails.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, u64_of, Req, TestCluster};
use leasehold_node::security::auth::AuthPolicy;
use serde_json::{json, Value};

/// Bound on chromedriver answering `/status` after it was started.
const DRIVER_START_WAIT: Duration = Duration::from_secs(30);
/// Bound on one WebDriver command (a new session starts a browser: the slowest).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on the page showing what the API says (it polls about once a second).
const PAGE_WAIT: Duration = Duration::from_secs(30);
/// Bound on a 100 ms lease running out and being claimed again.
const EXPIRY_WAIT: Duration = Duration::from_secs(10);

const CHROMIUM_ARGS: [&str; 6] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
    // The page is on 127.0.0.1; a proxy from the environment must not get in between.
    "--no-proxy-server",
];

/// One browser (and its cluster) at a time: the tests share the machine's cores, and
/// every wait is bounded.
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---- finding the browser --------------------------------------------------------------

/// `name` on `PATH`, else `fallback` if it exists.
fn find_binary(name: &str, fallback: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| Some(PathBuf::from(fallback)).filter(|p| p.is_file()))
}

/// Chromium and chromedriver, or `None` after saying why the test is skipped (or
/// failing, when `LEASEHOLD_REQUIRE_BROWSER=1`).
fn browser_binaries() -> Option<(PathBuf, PathBuf)> {
    let chromium = find_binary("chromium", "/usr/bin/chromium");
    let driver = find_binary("chromedriver", "/usr/bin/chromedriver");
    if let (Some(c), Some(d)) = (&chromium, &driver) {
        return Some((c.clone(), d.clone()));
    }
    let missing = format!(
        "chromium: {}, chromedriver: {}",
        chromium.map_or("not found".into(), |p| p.display().to_string()),
        driver.map_or("not found".into(), |p| p.display().to_string()),
    );
    if std::env::var("LEASEHOLD_REQUIRE_BROWSER").as_deref() == Ok("1") {
        panic!(
            "LEASEHOLD_REQUIRE_BROWSER=1 but no headless browser ({missing}): \
             install it with `apt-get install -y chromium chromium-driver`"
        );
    }
    eprintln!(
        "SKIPPED ui_browser: no headless browser ({missing}); \
         `apt-get install -y chromium chromium-driver` to run it \
         (LEASEHOLD_REQUIRE_BROWSER=1 makes this a failure)"
    );
    None
}

/// Where the screenshot goes: `$CARGO_TARGET_DIR` (relative to the workspace when
/// relative), else the workspace's `target/`, then `ui-artifacts/`.
fn artifacts_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the node crate lives in the workspace")
        .to_path_buf();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => workspace.join(t),
        None => workspace.join("target"),
    };
    target.join("ui-artifacts")
}

// ---- chromedriver ---------------------------------------------------------------------

/// A running chromedriver and at most one session. Dropping it deletes the session (so
/// Chromium exits) and kills chromedriver's process group, also when a test panics.
struct Driver {
    child: Child,
    addr: SocketAddr,
    http: reqwest::Client,
    session: Option<String>,
    _log_dir: tempfile::TempDir,
}

impl Driver {
    /// Starts `chromedriver --port=N` on a free port of 127.0.0.1 and waits until ready.
    async fn start(chromedriver: &Path) -> Driver {
        use std::os::unix::process::CommandExt;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log_dir = tempfile::tempdir().unwrap();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .arg(format!(
                "--log-path={}",
                log_dir.path().join("chromedriver.log").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so Drop can end it together with what it started.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", chromedriver.display()));
        let driver = Driver {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(COMMAND_TIMEOUT)
                .build()
                .unwrap(),
            session: None,
            _log_dir: log_dir,
        };
        eventually(
            &format!("chromedriver on port {port} to be ready"),
            DRIVER_START_WAIT,
            || async {
                let status = driver.call(reqwest::Method::GET, "/status", None).await?;
                if status["ready"] == true {
                    Ok(())
                } else {
                    Err(status.to_string())
                }
            },
        )
        .await;
        driver
    }

    /// One WebDriver command; its `value`, or the WebDriver error as text.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let url = format!("http://{}{path}", self.addr);
        let mut req = self.http.request(method.clone(), &url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let what = format!("{method} {path}");
        let resp = req.send().await.map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status();
        let v: Value = resp
            .json()
            .await
            .map_err(|e| format!("{what}: unreadable answer: {e}"))?;
        if status.is_success() {
            Ok(v["value"].clone())
        } else {
            Err(format!("{what}: {status} {}", v["value"]))
        }
    }

    fn session_path(&self, rest: &str) -> String {
        let id = self.session.as_deref().expect("a session");
        format!("/session/{id}{rest}")
    }

    async fn new_session(&mut self, chromium: &Path) {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": CHROMIUM_ARGS},
        }}});
        let v = self
            .call(reqwest::Method::POST, "/session", Some(caps))
            .await
            .unwrap_or_else(|e| panic!("creating a Chromium session: {e}"));
        let id = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {v}"));
        self.session = Some(id.to_owned());
    }

    async fn goto(&self, url: &str) {
        self.call(
            reqwest::Method::POST,
            &self.session_path("/url"),
            Some(json!({"url": url})),
        )
        .await
        .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// Runs `script` (a function body) in the page; its return value.
    async fn execute(&self, script: &str, args: Value) -> Result<Value, String> {
        let body = json!({"script": script, "args": args});
        self.call(
            reqwest::Method::POST,
            &self.session_path("/execute/sync"),
            Some(body),
        )
        .await
    }

    /// The reference of the element `css` finds (WebDriver Find Element).
    async fn find(&self, css: &str) -> Result<String, String> {
        let found = self
            .call(
                reqwest::Method::POST,
                &self.session_path("/element"),
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        // W3C: the element reference is under this fixed key.
        found["element-6066-11e4-a52e-4f735466cecf"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no element reference in {found}"))
    }

    /// The rendered text of the element `css` finds.
    async fn text_of(&self, css: &str) -> Result<String, String> {
        let id = self.find(css).await?;
        let text = self
            .call(
                reqwest::Method::GET,
                &self.session_path(&format!("/element/{id}/text")),
                None,
            )
            .await?;
        text.as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("text of {css}: {text}"))
    }

    /// Clicks the element `css` finds as a user would (WebDriver Element Click: scrolled
    /// into view, a real mouse event). Retried, within [`PAGE_WAIT`], while the element
    /// is missing or was replaced by a re-render before the click reached it; those
    /// errors come before any click, so a retry never clicks twice.
    async fn click(&self, css: &str) {
        eventually(&format!("a click on {css}"), PAGE_WAIT, || async {
            let id = self.find(css).await?;
            let path = self.session_path(&format!("/element/{id}/click"));
            self.call(reqwest::Method::POST, &path, Some(json!({})))
                .await
                .map(|_| ())
        })
        .await
    }

    /// Clears the input `css` finds and types `text` into it (WebDriver Element Send
    /// Keys: real key events; `\u{E007}` is Enter).
    async fn type_into(&self, css: &str, text: &str) {
        let id = self
            .find(css)
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        let clear = self.session_path(&format!("/element/{id}/clear"));
        self.call(reqwest::Method::POST, &clear, Some(json!({})))
            .await
            .unwrap_or_else(|e| panic!("clearing {css}: {e}"));
        let keys = self.session_path(&format!("/element/{id}/value"));
        self.call(reqwest::Method::POST, &keys, Some(json!({"text": text})))
            .await
            .unwrap_or_else(|e| panic!("typing into {css}: {e}"));
    }

    /// A PNG of the viewport.
    async fn screenshot(&self) -> Vec<u8> {
        let v = self
            .call(
                reqwest::Method::GET,
                &self.session_path("/screenshot"),
                None,
            )
            .await
            .unwrap_or_else(|e| panic!("screenshot: {e}"));
        base64_decode(v.as_str().expect("a base64 string")).expect("valid base64")
    }

    /// Ends the session (Chromium exits) while chromedriver still runs.
    async fn quit(&mut self) {
        if self.session.is_some() {
            let path = self.session_path("");
            self.call(reqwest::Method::DELETE, &path, None)
                .await
                .unwrap_or_else(|e| panic!("deleting the session: {e}"));
            self.session = None;
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Drop cannot await: a blocking DELETE, best effort, so Chromium is not orphaned.
        if let Some(id) = self.session.take() {
            let _ = delete_session_blocking(self.addr, &id);
        }
        // SAFETY: kill(2) on the process group this test created for chromedriver.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn delete_session_blocking(addr: SocketAddr, id: &str) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "DELETE /session/{id} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut sink = Vec::new();
    s.read_to_end(&mut sink).map(|_| ())
}

/// Standard base64 (RFC 4648, padded), as WebDriver returns screenshots.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|c| **c == b'=').count();
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let v = if i >= 4 - pad { 0 } else { sextet(*c)? };
            n = (n << 6) | v;
        }
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    Some(out)
}

// ---- reading the page -----------------------------------------------------------------

/// What the page shows, read from the DOM by the `data-*` hooks app.js renders.
const READ_PAGE: &str = r#"
const field = (row, name) => {
  const c = row.querySelector('[data-field="' + name + '"]');
  return c ? c.textContent.trim() : null;
};
const members = [...document.querySelectorAll('#members tbody tr[data-node-id]')].map(r => ({
  id: Number(r.dataset.nodeId), role: r.dataset.role, health: r.dataset.health,
  term: field(r, 'term'), applied: field(r, 'applied_index'),
}));
const actions = (row) => [...row.querySelectorAll('button[data-action]')].map(b => b.dataset.action);
const detailOf = (id) => {
  const d = [...document.querySelectorAll('#jobs tr.job-detail')].find(r => r.dataset.detailFor === id);
  const out = {};
  if (d) for (const s of d.querySelectorAll('[data-field]')) out[s.dataset.field] = s.textContent;
  return out;
};
const jobs = {};
for (const r of document.querySelectorAll('#jobs tbody tr[data-job-id]')) {
  const pill = r.querySelector('[data-field="state"] .pill');
  jobs[r.dataset.jobId] = {
    state: r.dataset.state, state_text: field(r, 'state'), owner: field(r, 'owner'),
    generation: field(r, 'generation'), lease: field(r, 'lease'),
    pill: pill ? pill.className : null, actions: actions(r), detail: detailOf(r.dataset.jobId),
  };
}
const dead = {};
for (const r of document.querySelectorAll('#dead tbody tr[data-job-id]')) {
  dead[r.dataset.jobId] = {
    state: r.dataset.state, last_error: field(r, 'last_error'), attempts: field(r, 'attempts'),
    failed: field(r, 'failed'), actions: actions(r),
  };
}
const action = document.getElementById('action-status');
const feed = [...document.querySelectorAll('#rejections li[data-seq]')].map(li => ({
  seq: Number(li.dataset.seq), code: li.dataset.code, job: li.dataset.jobId || null,
  stale: li.classList.contains('stale'), text: li.textContent,
}));
const banner = document.getElementById('error-banner');
return {
  members, jobs, feed, dead,
  dead_note: document.getElementById('dead-note').textContent,
  action: action.hidden ? null : {outcome: action.dataset.outcome, text: action.textContent},
  title: document.title,
  // Markup that job data could have smuggled in: none may exist.
  injected: document.querySelectorAll('main img, main b, main i, main script').length,
  banner: banner.hidden ? null : banner.textContent,
  updated_ms: document.getElementById('last-updated').dataset.updatedMs || null,
};
"#;

/// Polls the page until `check` accepts what it shows; panics (after saving a
/// screenshot of the page as it was) otherwise.
async fn wait_page<T>(
    driver: &Driver,
    what: &str,
    check: impl Fn(&Value) -> Result<T, String>,
) -> T {
    wait_read(driver, READ_PAGE, what, check).await
}

/// Polls what `script` reads from the page until `check` accepts it; panics (after
/// saving a screenshot of the page as it was) otherwise.
async fn wait_read<T>(
    driver: &Driver,
    script: &str,
    what: &str,
    check: impl Fn(&Value) -> Result<T, String>,
) -> T {
    let deadline = tokio::time::Instant::now() + PAGE_WAIT;
    loop {
        let last = match driver.execute(script, json!([])).await {
            Ok(page) => match check(&page) {
                Ok(v) => return v,
                Err(e) => format!("{e}; page: {page}"),
            },
            Err(e) => e,
        };
        if tokio::time::Instant::now() >= deadline {
            let shot = save_screenshot(driver, "dashboard-failure.png").await;
            panic!(
                "timed out after {PAGE_WAIT:?} waiting for the page to show {what} \
                 (screenshot: {}); last: {last}",
                shot.display()
            );
        }
        tokio::time::sleep(common::POLL * 4).await;
    }
}

async fn save_screenshot(driver: &Driver, name: &str) -> PathBuf {
    let png = driver.screenshot().await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let dir = artifacts_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, &png).unwrap();
    path
}

/// Sets the jobs' state filter to `arguments[0]` as a user's choice would; its value.
const SET_STATE_FILTER: &str = r#"const s = document.getElementById('filter-state');
    s.value = arguments[0]; s.dispatchEvent(new Event('change')); return s.value;"#;

fn job_row<'a>(page: &'a Value, id: &str) -> Result<&'a Value, String> {
    page["jobs"]
        .get(id)
        .ok_or_else(|| format!("no row for job {id}"))
}

// ---- the test -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dashboard_shows_the_cluster_and_follows_a_job_in_a_real_browser() {
    let Some((chromium, chromedriver)) = browser_binaries() else {
        return;
    };
    let _one_browser = BROWSER.lock().await;
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    let f = c.follower_of(leader);

    // A claimed job, and another waiting in its own queue.
    let lease = c
        .post(
            f,
            "/v1/jobs/invoice-42/claim",
            json!({"owner": "worker-a", "ttl_ms": 120_000}),
        )
        .await
        .ok(200);
    let generation = u64_of(&lease, "generation");
    let generation_text = generation.to_string();
    c.post(
        f,
        "/v1/jobs",
        json!({"id": "report-7", "queue": "reports", "payload": {"month": 11}}),
    )
    .await
    .ok(201);

    let mut driver = Driver::start(&chromedriver).await;
    driver.new_session(&chromium).await;
    let url = format!("http://{}/ui", c.addr(f));
    driver.goto(&url).await;

    // Three members, one leader (the one the API names), all healthy; the claimed job
    // with its owner and generation and a running countdown.
    wait_page(
        &driver,
        "three healthy members and the claimed job",
        |page| {
            let members = page["members"].as_array().ok_or("no members")?;
            let ids: Vec<u64> = members.iter().filter_map(|m| m["id"].as_u64()).collect();
            let leaders: Vec<u64> = members
                .iter()
                .filter(|m| m["role"] == "Leader")
                .filter_map(|m| m["id"].as_u64())
                .collect();
            if ids != [1, 2, 3]
                || leaders != [leader]
                || members.iter().any(|m| m["health"] != "ok")
            {
                return Err(format!("members {ids:?}, leaders {leaders:?}"));
            }
            let job = job_row(page, "invoice-42")?;
            let lease_text = job["lease"].as_str().unwrap_or_default();
            if job["state"] != "leased"
                || job["owner"] != "worker-a"
                || job["generation"] != generation_text.as_str()
                || !lease_text.ends_with(" s")
            {
                return Err(format!("invoice-42 row {job}"));
            }
            job_row(page, "report-7")?;
            match &page["banner"] {
                Value::Null => Ok(()),
                b => Err(format!("error banner: {b}")),
            }
        },
    )
    .await;
    // The same, as WebDriver's rendered text of the cells.
    let owner_cell = r#"#jobs tr[data-job-id="invoice-42"] td[data-field="owner"]"#;
    let generation_cell = r#"#jobs tr[data-job-id="invoice-42"] td[data-field="generation"]"#;
    assert_eq!(driver.text_of(owner_cell).await.unwrap(), "worker-a");
    assert_eq!(
        driver.text_of(generation_cell).await.unwrap(),
        generation_text
    );

    // The worker completes: the row follows.
    c.post(
        f,
        "/v1/jobs/invoice-42/complete",
        json!({"owner": "worker-a", "generation": generation, "result": {"paid": true}}),
    )
    .await
    .ok(200);
    wait_page(&driver, "invoice-42 completed", |page| {
        let job = job_row(page, "invoice-42")?;
        if job["state"] == "completed"
            && job["state_text"] == "completed"
            && job["lease"] == "\u{2014}"
        {
            Ok(())
        } else {
            Err(format!("invoice-42 row {job}"))
        }
    })
    .await;

    // A stale completion: worker-b's 100 ms lease runs out, worker-c claims the job,
    // worker-b comes back with its old generation and is fenced off.
    c.post(
        f,
        "/v1/jobs/export-9/claim",
        json!({"owner": "worker-b", "ttl_ms": 100}),
    )
    .await
    .ok(200);
    eventually(
        "worker-c to claim export-9 after the lease ran out",
        EXPIRY_WAIT,
        || async {
            let r = c
                .post(
                    f,
                    "/v1/jobs/export-9/claim",
                    json!({"owner": "worker-c", "ttl_ms": 90_000}),
                )
                .await;
            if r.status == 200 {
                Ok(())
            } else {
                Err(r.text())
            }
        },
    )
    .await;
    c.post(
        f,
        "/v1/jobs/export-9/complete",
        json!({"owner": "worker-b", "generation": 1}),
    )
    .await
    .err(409, "stale_lease");
    wait_page(&driver, "the stale completion in the feed", |page| {
        let feed = page["feed"].as_array().ok_or("no feed")?;
        let stale = feed
            .iter()
            .find(|r| r["code"] == "stale_lease" && r["job"] == "export-9")
            .ok_or("no stale_lease for export-9 in the feed")?;
        let text = stale["text"].as_str().unwrap_or_default();
        if stale["stale"] != true
            || !text.contains("worker-b")
            || !text.contains("current generation 2")
        {
            return Err(format!("feed item {stale}"));
        }
        // Newest first.
        let seqs: Vec<u64> = feed.iter().filter_map(|r| r["seq"].as_u64()).collect();
        if !seqs.windows(2).all(|w| w[0] > w[1]) {
            return Err(format!("feed order {seqs:?}"));
        }
        let job = job_row(page, "export-9")?;
        if job["owner"] != "worker-c" || job["generation"] != "2" {
            return Err(format!("export-9 row {job}"));
        }
        Ok(())
    })
    .await;

    // The state filter narrows the table to completed jobs, and back.
    driver
        .execute(SET_STATE_FILTER, json!(["completed"]))
        .await
        .unwrap();
    wait_page(&driver, "only completed jobs", |page| {
        let ids: Vec<&String> = page["jobs"].as_object().ok_or("no jobs")?.keys().collect();
        if ids == ["invoice-42"] {
            Ok(())
        } else {
            Err(format!("rows {ids:?}"))
        }
    })
    .await;
    driver.execute(SET_STATE_FILTER, json!([""])).await.unwrap();
    wait_page(&driver, "all three jobs again", |page| {
        let n = page["jobs"].as_object().map_or(0, |j| j.len());
        if n == 3 && page["banner"].is_null() && page["updated_ms"].is_string() {
            Ok(())
        } else {
            Err(format!("{n} rows"))
        }
    })
    .await;

    let shot = save_screenshot(&driver, "dashboard.png").await;
    println!("dashboard screenshot: {}", shot.display());
    driver.quit().await;
    drop(driver);
    c.shutdown().await;
}

// ---- the lifecycle: dead letters, redrive, retry, cancel ------------------------------

/// An admin token for the test's own API calls; the page is given the other two.
const ADMIN: &str = "ui-admin-6b2c";
const OPERATOR: &str = "ui-operator-3f9a";
const READER: &str = "ui-reader-81d0";

/// What a hostile worker could report as an error: markup, which the page must show as
/// text (if it became markup, the image's handler would rename the page).
const HOSTILE_ERROR: &str =
    r#"<img src=x onerror="document.title='pwned'"> 550 <b>mailbox full</b>"#;
/// What the page's Cancel sends as the reason (app.js `CANCEL_REASON`).
const CANCEL_REASON: &str = "cancelled from the dashboard";

fn lifecycle_auth(dir: &Path) -> Arc<AuthPolicy> {
    let path = dir.join("auth.toml");
    let entries: String = [(ADMIN, "admin"), (OPERATOR, "operator"), (READER, "reader")]
        .iter()
        .map(|(token, role)| format!("[[token]]\ntoken = \"{token}\"\nrole = \"{role}\"\n\n"))
        .collect();
    std::fs::write(&path, entries).unwrap();
    Arc::new(AuthPolicy::load(&path).unwrap())
}

/// Bound on the test's own API calls answering other than 503/504 (a leader that lost its
/// quorum lease for a moment, on a loaded machine).
const API_WAIT: Duration = Duration::from_secs(20);

/// `req` through node `via` with the admin token, tried again on 503/504 with one
/// Idempotency-Key (api.md "Retries"); its JSON, which must come with `status`.
async fn admin(c: &TestCluster, via: u64, mut req: Req, status: u16) -> Value {
    static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
    req.headers
        .push(("authorization".into(), format!("Bearer {ADMIN}")));
    if req.method == reqwest::Method::POST {
        req = req.key(&format!(
            "ui-test-{}",
            NEXT_KEY.fetch_add(1, Ordering::Relaxed)
        ));
    }
    c.send_retrying(&[via], &req, API_WAIT).await.ok(status)
}

async fn job_of(c: &TestCluster, via: u64, id: &str) -> Value {
    admin(c, via, Req::get(format!("/v1/jobs/{id}")), 200).await
}

/// Submits `id` to queue `mail` and claims it for `mailer`; the lease.
async fn submit_and_claim(c: &TestCluster, via: u64, id: &str) -> Value {
    let job = json!({"id": id, "queue": "mail"});
    admin(c, via, Req::post("/v1/jobs", &job), 201).await;
    let claim = json!({"owner": "mailer", "ttl_ms": 120_000});
    admin(
        c,
        via,
        Req::post(format!("/v1/jobs/{id}/claim"), &claim),
        200,
    )
    .await
}

/// A job of queue `mail` that failed with `error`: a dead letter.
async fn failed_job(c: &TestCluster, via: u64, id: &str, error: &str) -> Value {
    let lease = submit_and_claim(c, via, id).await;
    let fail = json!({"owner": "mailer", "generation": lease["generation"], "error": error});
    let job = admin(c, via, Req::post(format!("/v1/jobs/{id}/fail"), &fail), 200).await;
    assert_eq!(
        (&job["state"], &job["last_error"]),
        (&json!("failed"), &json!(error))
    );
    job
}

/// Types `token` into the page's token field and submits it, as a user does.
async fn use_token(driver: &Driver, token: &str) {
    driver.type_into("#token", token).await;
    driver.click("#token-form button[type=submit]").await;
}

/// The page's last action outcome when it is `outcome` and its text holds every one of
/// `needles`.
fn action_shows(page: &Value, outcome: &str, needles: &[&str]) -> Result<(), String> {
    let action = &page["action"];
    let text = action["text"].as_str().unwrap_or_default();
    if action["outcome"] == outcome && needles.iter().all(|n| text.contains(n)) {
        Ok(())
    } else {
        Err(format!("action status {action}"))
    }
}

/// The ids of the dead-letter rows, sorted.
fn dead_ids(page: &Value) -> Vec<String> {
    let mut ids: Vec<String> = page["dead"]
        .as_object()
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default();
    ids.sort();
    ids
}

/// Nothing job data carried became markup, and no handler it carried ran.
fn nothing_injected(page: &Value) -> Result<(), String> {
    if page["injected"] == 0 && page["title"] == "Leasehold dashboard" {
        Ok(())
    } else {
        Err(format!(
            "injected elements {}, title {}",
            page["injected"], page["title"]
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dashboard_shows_dead_letters_and_drives_the_lifecycle() {
    let Some((chromium, chromedriver)) = browser_binaries() else {
        return;
    };
    let _one_browser = BROWSER.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let policy = lifecycle_auth(dir.path());
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policy.clone())).await;
    let leader = c.wait_for_leader_in_process().await;
    // Cancel, retry and redrive are served once the cluster runs version 1.1.
    c.wait_settled().await;
    let f = c.follower_of(leader);

    // Two dead letters in queue `mail`; a job due in ten minutes with a priority; a
    // leased job whose holder reported progress.
    let failed = failed_job(&c, f, "mail-1", HOSTILE_ERROR).await;
    failed_job(&c, f, "mail-4", "smtp timeout").await;
    let due_ms = u64_of(&failed, "updated_ms") + 600_000;
    let scheduled = json!({"id": "mail-2", "queue": "mail", "run_at_ms": due_ms, "priority": 5});
    admin(&c, f, Req::post("/v1/jobs", &scheduled), 201).await;
    let lease = submit_and_claim(&c, f, "mail-3").await;
    let progress = json!({"owner": "mailer", "generation": lease["generation"],
        "progress": {"sent": 3, "of": "<i>10</i>"}});
    admin(&c, f, Req::post("/v1/jobs/mail-3/renew", &progress), 200).await;

    let mut driver = Driver::start(&chromedriver).await;
    driver.new_session(&chromium).await;
    driver.goto(&format!("http://{}/ui", c.addr(f))).await;

    // Without a token the node refuses the page's reads, and the page says why.
    wait_page(&driver, "the 401 in the banner", |page| {
        let banner = page["banner"].as_str().unwrap_or_default();
        if banner.contains("401 unauthenticated") && banner.contains("reader token") {
            Ok(())
        } else {
            Err(format!("banner {banner:?}"))
        }
    })
    .await;

    // A reader sees every job with its 1.1 details, job data as text.
    use_token(&driver, READER).await;
    wait_page(
        &driver,
        "the jobs with their due time, priority, progress, error",
        |page| {
            let due = job_row(page, "mail-2")?;
            let lease_text = due["lease"].as_str().unwrap_or_default();
            if due["state"] != "pending"
                || !lease_text.starts_with("due in ")
                || !lease_text.contains(" m ")
                || due["detail"]["priority"] != "priority 5"
                || due["actions"] != json!(["cancel"])
            {
                return Err(format!("mail-2 row {due}"));
            }
            let leased = job_row(page, "mail-3")?;
            let progress = leased["detail"]["progress"].as_str().unwrap_or_default();
            if leased["state"] != "leased" || !progress.contains(r#""of":"<i>10</i>""#) {
                return Err(format!("mail-3 row {leased}"));
            }
            let dead = job_row(page, "mail-1")?;
            let error = dead["detail"]["last_error"].as_str().unwrap_or_default();
            if dead["pill"] != "pill state-failed"
                || dead["actions"] != json!(["retry"])
                || error != format!("error: {HOSTILE_ERROR}")
            {
                return Err(format!("mail-1 row {dead}"));
            }
            if !page["banner"].is_null() {
                return Err(format!("banner {}", page["banner"]));
            }
            nothing_injected(page)
        },
    )
    .await;

    // The dead-letter view of queue `mail`: both failed jobs, each with its error.
    driver.type_into("#dead-queue", "mail\u{E007}").await;
    wait_page(
        &driver,
        "mail's two dead letters with their errors",
        |page| {
            let errors = (
                &page["dead"]["mail-1"]["last_error"],
                &page["dead"]["mail-4"]["last_error"],
            );
            if dead_ids(page) != ["mail-1", "mail-4"]
                || errors != (&json!(HOSTILE_ERROR), &json!("smtp timeout"))
                || page["dead"]["mail-1"]["actions"] != json!(["retry"])
                || page["dead_note"] != "2 failed jobs of queue mail"
            {
                return Err(format!(
                    "dead letters {} ({})",
                    page["dead"], page["dead_note"]
                ));
            }
            nothing_injected(page)
        },
    )
    .await;

    // A reader's Redrive is refused, and the page shows the API's answer.
    driver.click("#redrive").await;
    wait_page(&driver, "the refused redrive", |page| {
        action_shows(
            page,
            "error",
            &["redrive mail", "403 permission_denied", "operator"],
        )
    })
    .await;
    assert_eq!(job_of(&c, f, "mail-1").await["state"], "failed");

    // An operator retries one dead letter from its row ...
    use_token(&driver, OPERATOR).await;
    driver
        .click(r#"#dead tr[data-job-id="mail-4"] button[data-action="retry"]"#)
        .await;
    wait_page(
        &driver,
        "mail-4 retried and gone from the dead letters",
        |page| {
            action_shows(page, "ok", &["retry mail-4", "now pending"])?;
            match dead_ids(page).as_slice() {
                [only] if only == "mail-1" => Ok(()),
                ids => Err(format!("dead letters {ids:?}")),
            }
        },
    )
    .await;
    let retried = job_of(&c, f, "mail-4").await;
    assert_eq!(
        (&retried["state"], &retried["attempts"]),
        (&json!("pending"), &json!(0))
    );

    // ... and redrives the rest of the queue.
    driver.click("#redrive").await;
    wait_page(&driver, "the queue redriven", |page| {
        action_shows(page, "ok", &["redrive mail", "retried 1 failed job"])?;
        let row = job_row(page, "mail-1")?;
        if dead_ids(page).is_empty() && row["state"] == "pending" {
            Ok(())
        } else {
            Err(format!("dead letters {}, mail-1 row {row}", page["dead"]))
        }
    })
    .await;
    assert_eq!(job_of(&c, f, "mail-1").await["state"], "pending");

    // Cancel from the page: the pending job is cancelled at once ...
    driver
        .click(r#"#jobs tr[data-job-id="mail-2"] button[data-action="cancel"]"#)
        .await;
    wait_page(&driver, "mail-2 shown cancelled", |page| {
        action_shows(page, "ok", &["cancel mail-2", "now cancelled"])?;
        let row = job_row(page, "mail-2")?;
        if row["state"] == "cancelled"
            && row["state_text"] == "cancelled"
            && row["pill"] == "pill state-cancelled"
            && row["lease"] == "\u{2014}"
            && row["actions"] == json!(["retry"])
            && row["detail"]["cancel"] == format!("cancel reason: {CANCEL_REASON}")
        {
            Ok(())
        } else {
            Err(format!("mail-2 row {row}"))
        }
    })
    .await;
    let cancelled = job_of(&c, f, "mail-2").await;
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["cancel_reason"], CANCEL_REASON, "{cancelled}");

    // ... the leased one is asked to stop: its holder learns it at its next renew.
    driver
        .click(r#"#jobs tr[data-job-id="mail-3"] button[data-action="cancel"]"#)
        .await;
    wait_page(&driver, "mail-3's cancel requested", |page| {
        action_shows(page, "ok", &["cancel mail-3", "cancel requested"])?;
        let row = job_row(page, "mail-3")?;
        let wanted = format!("cancel requested: {CANCEL_REASON}");
        if row["state"] == "leased"
            && row["detail"]["cancel"] == wanted.as_str()
            && row["actions"] == json!([])
        {
            Ok(())
        } else {
            Err(format!("mail-3 row {row}"))
        }
    })
    .await;
    let requested = job_of(&c, f, "mail-3").await;
    assert_eq!(
        (&requested["state"], &requested["cancel_requested"]),
        (&json!("leased"), &json!(true))
    );

    // The state filter knows `cancelled`.
    driver
        .execute(SET_STATE_FILTER, json!(["cancelled"]))
        .await
        .unwrap();
    wait_page(&driver, "only the cancelled job", |page| {
        let ids: Vec<&String> = page["jobs"].as_object().ok_or("no jobs")?.keys().collect();
        if ids == ["mail-2"] {
            Ok(())
        } else {
            Err(format!("rows {ids:?}"))
        }
    })
    .await;
    driver.execute(SET_STATE_FILTER, json!([""])).await.unwrap();
    wait_page(&driver, "all four jobs again", |page| {
        let n = page["jobs"].as_object().map_or(0, |j| j.len());
        if n == 4 {
            Ok(())
        } else {
            Err(format!("{n} rows"))
        }
    })
    .await;

    let shot = save_screenshot(&driver, "dashboard-lifecycle.png").await;
    println!("dashboard screenshot: {}", shot.display());
    driver.quit().await;
    drop(driver);
    c.shutdown().await;
}

// ---- the event feed, a job's timeline and the throughput chart (issue 32 item 5) ------

/// What the event panels show, read from the DOM by the `data-*` hooks app.js renders.
const READ_EVENTS: &str = r#"
const events = [...document.querySelectorAll('#events li[data-seq]')].map(li => ({
  seq: Number(li.dataset.seq), event: li.dataset.event, job: li.dataset.jobId,
  queue: li.dataset.queue, text: li.textContent,
}));
const lanes = [...document.querySelectorAll('#timeline-svg g.lane')].map(g => ({
  generation: Number(g.dataset.generation), owner: g.dataset.owner, ending: g.dataset.ending,
  label: g.querySelector('text.lane-label').textContent,
  bar: g.querySelector('rect.bar').getAttribute('class'),
  width: Number(g.querySelector('rect.bar').getAttribute('width')),
}));
const marks = [...document.querySelectorAll('#timeline-svg g.mark')].map(g => g.dataset.marker);
const axis = [...document.querySelectorAll('#timeline-svg text.axis')].map(t => t.textContent);
const series = {};
for (const p of document.querySelectorAll('#throughput-svg polyline[data-series]')) {
  series[p.dataset.series] = {
    sum: Number(p.dataset.sum), max: Number(p.dataset.max),
    points: p.getAttribute('points').trim().split(/\s+/).length,
  };
}
const status = document.getElementById('events-status');
return {
  events, lanes, marks, axis, series,
  after: Number(status.dataset.after || -1), errors: Number(status.dataset.errors || 0),
  status: status.textContent,
  injected: document.querySelectorAll('main img, main b, main i, main script').length,
  title: document.title,
};
"#;

/// Makes the page's `/v1/events` calls fail as a lost network does (`arguments[0]`
/// true), or lets them through again (false). app.js looks `fetch` up at each call.
const BREAK_FEED: &str = r#"
if (!window.__realFetch) window.__realFetch = window.fetch;
window.fetch = arguments[0]
  ? (url, init) => String(url).startsWith('/v1/events')
      ? Promise.reject(new TypeError('Failed to fetch (test: network down)'))
      : window.__realFetch(url, init)
  : window.__realFetch;
return true;
"#;

/// The feed items' seqs, newest first, when they are exactly `first..=last` with no gap
/// and no duplicate.
fn feed_is_contiguous(page: &Value, first: u64, last: u64) -> Result<(), String> {
    let seqs: Vec<u64> = page["events"]
        .as_array()
        .ok_or("no events")?
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    let wanted: Vec<u64> = (first..=last).rev().collect();
    if seqs == wanted {
        Ok(())
    } else {
        Err(format!(
            "feed seqs {seqs:?}, wanted {first}..={last} newest first"
        ))
    }
}

/// The events the feed shows for `job`, oldest first.
fn job_events(page: &Value, job: &str) -> Vec<String> {
    let mut names: Vec<String> = page["events"]
        .as_array()
        .map(|es| {
            es.iter()
                .filter(|e| e["job"] == job)
                .filter_map(|e| e["event"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.reverse();
    names
}

/// The cluster's newest event seq, as `job`'s history ends.
async fn last_seq_of(c: &TestCluster, via: u64, job: &str) -> u64 {
    let h = admin(c, via, Req::get(format!("/v1/jobs/{job}/history")), 200).await;
    let events = h["events"].as_array().expect("events");
    u64_of(events.last().expect("an event"), "seq")
}

/// Claims `job` for `owner` with `ttl_ms`, retried until the job is free (200).
async fn claim_when_free(c: &TestCluster, via: u64, job: &str, owner: &str, ttl_ms: u64) -> Value {
    let body = json!({"owner": owner, "ttl_ms": ttl_ms});
    let mut req = Req::post(format!("/v1/jobs/{job}/claim"), &body);
    req.headers
        .push(("authorization".into(), format!("Bearer {ADMIN}")));
    eventually(&format!("{owner} to claim {job}"), EXPIRY_WAIT, || async {
        let r = c.send(via, &req).await;
        if r.status == 200 {
            Ok(r.json())
        } else {
            Err(r.text())
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dashboard_follows_the_event_feed_and_draws_a_jobs_timeline() {
    let Some((chromium, chromedriver)) = browser_binaries() else {
        return;
    };
    let _one_browser = BROWSER.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let policy = lifecycle_auth(dir.path());
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policy.clone())).await;
    let leader = c.wait_for_leader_in_process().await;
    // Events are recorded once the cluster runs version 1.1 (entry version 5).
    c.wait_settled().await;
    let f = c.follower_of(leader);

    // Before the page opens: not in its feed, which starts at event_seq.
    admin(
        &c,
        f,
        Req::post("/v1/jobs", &json!({"id": "before", "queue": "mail"})),
        201,
    )
    .await;
    let start = last_seq_of(&c, f, "before").await;

    let mut driver = Driver::start(&chromedriver).await;
    driver.new_session(&chromium).await;
    driver.goto(&format!("http://{}/ui", c.addr(f))).await;
    // A reader token: the feed's long polls carry it in their Authorization header.
    use_token(&driver, READER).await;
    wait_read(&driver, READ_EVENTS, "the feed following", |page| {
        let status = page["status"].as_str().unwrap_or_default();
        if page["after"].as_u64() >= Some(start) && status.starts_with("following after seq") {
            Ok(())
        } else {
            Err(format!("status {status:?}, after {}", page["after"]))
        }
    })
    .await;

    // tl-1: worker-a's 100 ms lease runs out, worker-b claims it and completes; a job of
    // another queue besides.
    let a = claim_when_free(&c, f, "tl-1", "worker-a", 100).await;
    assert_eq!(a["generation"], 1, "{a}");
    let b = claim_when_free(&c, f, "tl-1", "worker-b", 60_000).await;
    let done = json!({"owner": "worker-b", "generation": b["generation"]});
    admin(&c, f, Req::post("/v1/jobs/tl-1/complete", &done), 200).await;
    admin(
        &c,
        f,
        Req::post("/v1/jobs", &json!({"id": "rep-1", "queue": "reports"})),
        201,
    )
    .await;
    let last = last_seq_of(&c, f, "rep-1").await;

    // The feed shows them as they happen: newest first, every seq once, nothing older
    // than the page.
    let page = wait_read(&driver, READ_EVENTS, "tl-1's events in the feed", |page| {
        feed_is_contiguous(page, start + 1, last)?;
        let tl = job_events(page, "tl-1");
        if tl != ["submitted", "claimed", "expired", "claimed", "completed"] {
            return Err(format!("tl-1 events {tl:?}"));
        }
        Ok(page.clone())
    })
    .await;
    assert!(job_events(&page, "before").is_empty(), "{page}");

    // The queue filter narrows the list.
    driver.type_into("#events-queue", "reports").await;
    wait_read(&driver, READ_EVENTS, "only queue reports", |page| {
        let queues: Vec<&Value> = page["events"]
            .as_array()
            .ok_or("no events")?
            .iter()
            .map(|e| &e["queue"])
            .collect();
        if queues == [&json!("reports")] {
            Ok(())
        } else {
            Err(format!("queues {queues:?}"))
        }
    })
    .await;
    driver.type_into("#events-queue", "").await;

    // tl-1's timeline: two lanes, worker-a's expired, worker-b's completed, its
    // submission a marker, and a time axis.
    driver.type_into("#timeline-job", "tl-1\u{E007}").await;
    wait_read(&driver, READ_EVENTS, "tl-1's timeline", |page| {
        let lanes: Vec<(u64, String, String)> = page["lanes"]
            .as_array()
            .ok_or("no lanes")?
            .iter()
            .map(|l| {
                let s = |k: &str| l[k].as_str().unwrap_or_default().to_owned();
                (
                    l["generation"].as_u64().unwrap_or(0),
                    s("owner"),
                    s("ending"),
                )
            })
            .collect();
        let wanted = [
            (1, "worker-a".to_owned(), "expired".to_owned()),
            (2, "worker-b".to_owned(), "completed".to_owned()),
        ];
        if lanes != wanted {
            return Err(format!("lanes {lanes:?}"));
        }
        let first = &page["lanes"][0];
        if first["label"] != "gen 1 \u{b7} worker-a" || first["bar"] != "bar end-expired" {
            return Err(format!("lane {first}"));
        }
        if page["marks"] != json!(["submitted"])
            || page["axis"].as_array().map_or(0, |a| a.len()) < 2
        {
            return Err(format!("marks {}, axis {}", page["marks"], page["axis"]));
        }
        Ok(())
    })
    .await;

    // The chart counted the claims, the expiry and the completion.
    wait_read(
        &driver,
        READ_EVENTS,
        "the throughput chart's data",
        |page| {
            let s = &page["series"];
            let sum = |k: &str| s[k]["sum"].as_u64().unwrap_or(0);
            if sum("claimed") == 2
                && sum("expired") == 1
                && sum("completed") == 1
                && s["claimed"]["points"] == 180
            {
                Ok(())
            } else {
                Err(format!("series {s}"))
            }
        },
    )
    .await;

    // The network fails under the feed: it retries from its last seq, and what happened
    // meanwhile shows once, with no gap.
    driver.execute(BREAK_FEED, json!([true])).await.unwrap();
    admin(
        &c,
        f,
        Req::post("/v1/jobs", &json!({"id": "net-1", "queue": "mail"})),
        201,
    )
    .await;
    wait_read(&driver, READ_EVENTS, "the feed failing", |page| {
        if page["errors"].as_u64() >= Some(2)
            && page["status"]
                .as_str()
                .unwrap_or_default()
                .starts_with("reconnecting")
        {
            Ok(())
        } else {
            Err(format!(
                "errors {}, status {}",
                page["errors"], page["status"]
            ))
        }
    })
    .await;
    admin(
        &c,
        f,
        Req::post("/v1/jobs", &json!({"id": "net-2", "queue": "mail"})),
        201,
    )
    .await;
    let claim = json!({"owner": "worker-c", "ttl_ms": 60_000});
    admin(&c, f, Req::post("/v1/jobs/net-2/claim", &claim), 200).await;
    let last = last_seq_of(&c, f, "net-2").await;
    driver.execute(BREAK_FEED, json!([false])).await.unwrap();
    wait_read(
        &driver,
        READ_EVENTS,
        "the feed resumed without a gap",
        |page| {
            feed_is_contiguous(page, start + 1, last)?;
            if job_events(page, "net-2") != ["submitted", "claimed"] {
                return Err(format!("net-2 events {:?}", job_events(page, "net-2")));
            }
            if page["injected"] != 0 || page["title"] != "Leasehold dashboard" {
                return Err("markup injected".into());
            }
            Ok(())
        },
    )
    .await;

    driver
        .execute(
            "document.getElementById('timeline-card').scrollIntoView(); return true;",
            json!([]),
        )
        .await
        .unwrap();
    let shot = save_screenshot(&driver, "dashboard-events.png").await;
    println!("dashboard screenshot: {}", shot.display());
    driver.quit().await;
    drop(driver);
    c.shutdown().await;
}

#[test]
fn base64_decodes_what_webdriver_sends() {
    assert_eq!(base64_decode("").unwrap(), b"");
    assert_eq!(base64_decode("TQ==").unwrap(), b"M");
    assert_eq!(base64_decode("TWE=").unwrap(), b"Ma");
    assert_eq!(base64_decode("TWFu").unwrap(), b"Man");
    assert_eq!(base64_decode("iVBORw0KGgo=").unwrap(), b"\x89PNG\r\n\x1a\n");
    assert!(base64_decode("TWF").is_none());
    assert!(base64_decode("TW!u").is_none());
}
