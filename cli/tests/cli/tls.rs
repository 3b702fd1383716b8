//! TLS (issue 7 part 3): three in-process nodes serving the client API and Raft RPC over
//! TLS, with certificates made at run time (rcgen). What each test shows:
//! - the cluster elects a leader and replicates over TLS, a follower forwards a claim to
//!   the leader over TLS, and the Rust client and the CLI work against `https://`
//!   endpoints given the CA;
//! - plain HTTP to the TLS port, a client without the CA and a client trusting another CA
//!   all fail;
//! - with `--tls-client-auth`, nodes still replicate (they present their certificates),
//!   a client with a certificate of the CA works, and a client or a would-be peer
//!   without one is refused at the handshake, before any HTTP;
//! - `serve` refuses a key that does not belong to its certificate, naming both files.

use leasehold_statemachine::commands::Tick;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::binary::{self, Out};
use crate::common::{eventually, TestCluster, LEADER_WAIT};
use leasehold_node::security::tls::{NodeTls, TlsFiles};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use serde_json::Value;
use tempfile::TempDir;

/// Bound on one CLI invocation.
const CMD_WAIT: Duration = Duration::from_secs(30);
/// Bound on one HTTPS request of the test itself.
const REQUEST_WAIT: Duration = Duration::from_secs(15);

/// A CA, a certificate per node (127.0.0.1, serverAuth + clientAuth), a client
/// certificate, and a second, unrelated CA — all as PEM files in a temp dir.
struct Pki {
    dir: TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("leasehold-tls-")
            .tempdir()
            .unwrap();
        let write = |name: &str, text: String| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let (ca_pem, issuer) = new_ca("Leasehold test CA");
        let ca = write("ca.pem", ca_pem);
        let (other_pem, _) = new_ca("Some other CA");
        let other_ca = write("other-ca.pem", other_pem);
        for id in 1..=3u64 {
            let (cert, key) = leaf(
                &issuer,
                &format!("node-{id}"),
                vec!["127.0.0.1".into(), "localhost".into()],
                vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ],
            );
            write(&format!("node-{id}.pem"), cert);
            write(&format!("node-{id}.key"), key);
        }
        let (cert, key) = leaf(
            &issuer,
            "worker-a",
            vec![],
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        );
        let client_cert = write("client.pem", cert);
        let client_key = write("client.key", key);
        Pki {
            dir,
            ca,
            other_ca,
            client_cert,
            client_key,
        }
    }

    fn node_files(&self, id: u64, client_auth: bool) -> TlsFiles {
        TlsFiles {
            cert: self.dir.path().join(format!("node-{id}.pem")),
            key: self.dir.path().join(format!("node-{id}.key")),
            ca: self.ca.clone(),
            client_auth,
        }
    }

    fn read(&self, path: &PathBuf) -> Vec<u8> {
        std::fs::read(path).unwrap()
    }

    /// An HTTPS client of the test trusting `ca`, presenting the client certificate
    /// when `identity`.
    fn https(&self, ca: &PathBuf, identity: bool) -> reqwest::Client {
        let mut b = reqwest::Client::builder()
            .no_proxy()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .timeout(REQUEST_WAIT)
            .add_root_certificate(reqwest::Certificate::from_pem(&self.read(ca)).unwrap());
        if identity {
            let mut pem = self.read(&self.client_cert);
            pem.extend(self.read(&self.client_key));
            b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
        }
        b.build().unwrap()
    }
}

/// A CA: its certificate (PEM) and what signs with it.
struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn new_ca(name: &str) -> (String, Ca) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Ca { cert, key })
}

fn leaf(
    issuer: &Ca,
    name: &str,
    sans: Vec<String>,
    usages: Vec<ExtendedKeyUsagePurpose>,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(sans).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = usages;
    let cert = params.signed_by(&key, &issuer.cert, &issuer.key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Three nodes serving TLS with `pki`'s node certificates.
async fn tls_cluster(pki: &Pki, client_auth: bool) -> TestCluster {
    let tls: BTreeMap<u64, Arc<NodeTls>> = (1..=3u64)
        .map(|id| {
            let files = pki.node_files(id, client_auth);
            (id, Arc::new(NodeTls::load(&files).unwrap()))
        })
        .collect();
    TestCluster::start_with(move |cfg| cfg.tls = Some(tls[&cfg.id].clone())).await
}

fn https_url(c: &TestCluster, id: u64, path: &str) -> String {
    format!("https://{}{path}", c.addr(id))
}

/// `GET /v1/cluster` of every node over HTTPS until all name the same leader; its id.
async fn wait_for_leader(c: &TestCluster, http: &reqwest::Client) -> u64 {
    eventually(
        "one leader known to all nodes, over TLS",
        LEADER_WAIT,
        || async {
            let mut leaders = Vec::new();
            for id in &c.ids {
                let r = http
                    .get(https_url(c, *id, "/v1/cluster"))
                    .send()
                    .await
                    .map_err(|e| format!("node {id}: {e:?}"))?;
                let v: Value = r.json().await.map_err(|e| format!("node {id}: {e}"))?;
                leaders.push(v["leader_id"].as_u64());
            }
            match leaders[0] {
                Some(l) if leaders.iter().all(|x| *x == Some(l)) => Ok(l),
                _ => Err(format!("leaders seen: {leaders:?}")),
            }
        },
    )
    .await
}

/// Waits until every node applied `index`, read over HTTPS.
async fn wait_all_applied(c: &TestCluster, http: &reqwest::Client, index: u64) {
    for id in c.ids.clone() {
        eventually(
            &format!("node {id} to apply index {index}"),
            Duration::from_secs(20),
            || async {
                let v: Value = http
                    .get(https_url(c, id, "/v1/cluster"))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?
                    .json()
                    .await
                    .map_err(|e| e.to_string())?;
                match v["applied_index"].as_u64() {
                    Some(a) if a >= index => Ok(()),
                    _ => Err(v.to_string()),
                }
            },
        )
        .await;
    }
}

async fn leasehold(args: &[&str]) -> Out {
    binary::run(binary::leasehold(args), CMD_WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tls_cluster_replicates_forwards_and_serves_the_client_and_the_cli() {
    let pki = Pki::new();
    let c = tls_cluster(&pki, false).await;
    let http = pki.https(&pki.ca, false);
    let leader = wait_for_leader(&c, &http).await;
    let follower = c.ids.iter().copied().find(|id| *id != leader).unwrap();

    // The Rust client, given only a follower: the claim is forwarded over TLS.
    let forwarded_before = c.node(follower).node.metrics.forwarded.get();
    let client = leasehold_client::Client::builder([https_url(&c, follower, "")])
        .ca_cert_pem(pki.read(&pki.ca))
        .build()
        .unwrap();
    let lease = client.claim("tls-job", "worker-a", 30_000).await.unwrap();
    assert_eq!(lease.generation(), 1);
    assert!(
        c.node(follower).node.metrics.forwarded.get() > forwarded_before,
        "the follower forwarded the claim to the leader"
    );
    // Replicated to every node over TLS.
    wait_all_applied(&c, &http, lease.wire().log_index).await;

    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = reqwest::Client::builder()
        .no_proxy()
        .timeout(REQUEST_WAIT)
        .build()
        .unwrap();
    let r = plain
        .get(format!("http://{}/healthz", c.addr(leader)))
        .send()
        .await;
    assert!(r.is_err(), "plain HTTP to a TLS port answered: {r:?}");

    // A client without the CA is refused before it sends anything…
    let no_ca = leasehold_client::Client::builder([https_url(&c, leader, "")]).build();
    let Err(err) = no_ca else {
        panic!("an https endpoint without a CA was accepted");
    };
    assert!(
        matches!(&err, leasehold_client::Error::Config(m) if m.contains("CA")),
        "{err}"
    );
    // …and one that trusts another CA fails on the node's certificate.
    let wrong_ca = leasehold_client::Client::builder([https_url(&c, leader, "")])
        .ca_cert_pem(pki.read(&pki.other_ca))
        .max_attempts(1)
        .build()
        .unwrap();
    let err = wrong_ca.get_job("tls-job").await.unwrap_err();
    assert!(
        matches!(&err, leasehold_client::Error::Unavailable { .. })
            && err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    // The CLI against https endpoints with --tls-ca.
    let endpoints = c
        .ids
        .iter()
        .map(|id| https_url(&c, *id, ""))
        .collect::<Vec<_>>()
        .join(",");
    let ca = pki.ca.display().to_string();
    let out = leasehold(&[
        "job",
        "get",
        "tls-job",
        "--endpoints",
        &endpoints,
        "--tls-ca",
        &ca,
        "--output",
        "json",
    ])
    .await;
    let job = out.json_for("job get over https");
    assert_eq!(job["owner"], "worker-a", "{job}");
    assert_eq!(job["generation"], 1, "{job}");
    let out = leasehold(&[
        "cluster",
        "status",
        "--endpoints",
        &endpoints,
        "--output",
        "json",
    ])
    .await;
    assert_eq!(
        out.code,
        leasehold_cli::jobs::EXIT_USAGE,
        "https without --tls-ca is a usage error"
    );
    assert!(out.stderr.contains("--tls-ca"), "{}", out.stderr);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_client_auth_only_certified_clients_and_peers_get_in() {
    let pki = Pki::new();
    let c = tls_cluster(&pki, true).await;
    // The nodes elect and replicate: each presents its own certificate to its peers.
    let certified = pki.https(&pki.ca, true);
    let leader = wait_for_leader(&c, &certified).await;
    let follower = c.ids.iter().copied().find(|id| *id != leader).unwrap();
    let client = leasehold_client::Client::builder([https_url(&c, follower, "")])
        .ca_cert_pem(pki.read(&pki.ca))
        .identity_pem(&pki.read(&pki.client_cert), &pki.read(&pki.client_key))
        .build()
        .unwrap();
    let lease = client.claim("mtls-job", "worker-a", 30_000).await.unwrap();
    wait_all_applied(&c, &certified, lease.wire().log_index).await;

    // Without a client certificate: refused at the handshake — a client call and a
    // would-be peer's Raft RPC alike get no HTTP answer at all (not a 401).
    let uncertified = pki.https(&pki.ca, false);
    let r = uncertified
        .get(https_url(&c, leader, "/v1/cluster"))
        .send()
        .await;
    let err = r.expect_err("a client without a certificate was answered");
    assert!(
        leasehold_node::security::tls::chain(&err)
            .to_lowercase()
            .contains("certificate"),
        "{}",
        leasehold_node::security::tls::chain(&err)
    );
    let r = uncertified
        .post(https_url(&c, leader, "/raft/vote"))
        .header("content-type", "application/x-bincode")
        .body(vec![0u8; 16])
        .send()
        .await;
    assert!(
        r.is_err(),
        "a peer without a certificate was answered: {r:?}"
    );

    // The CLI with a client certificate gets in; without one it does not.
    let endpoints = https_url(&c, leader, "");
    let ca = pki.ca.display().to_string();
    let (cert, key) = (
        pki.client_cert.display().to_string(),
        pki.client_key.display().to_string(),
    );
    let base = [
        "cluster",
        "status",
        "--endpoints",
        &endpoints,
        "--tls-ca",
        &ca,
    ];
    let mut with_cert = base.to_vec();
    with_cert.extend(["--tls-client-cert", &cert, "--tls-client-key", &key]);
    with_cert.extend(["--output", "json"]);
    let status = leasehold(&with_cert)
        .await
        .json_for("status with a client cert");
    assert_eq!(status["leader_id"], leader, "{status}");
    let out = leasehold(&base).await;
    assert_eq!(
        out.code,
        leasehold_cli::jobs::EXIT_UNAVAILABLE,
        "{}",
        out.stderr
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_key_of_another_certificate_naming_the_files() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let files = pki.node_files(1, false);
    let other_key = pki.node_files(2, false).key;
    let args = [
        "serve".to_owned(),
        "--id=1".into(),
        "--listen=127.0.0.1:0".into(),
        format!("--data-dir={}", data.path().display()),
        "--peer=1=127.0.0.1:1".into(),
        format!("--tls-cert={}", files.cert.display()),
        format!("--tls-key={}", other_key.display()),
        format!("--tls-ca={}", files.ca.display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = leasehold(&args).await;
    let stderr = &out.stderr;
    assert_ne!(out.code, 0, "{stderr}");
    assert!(
        stderr.contains("node-1.pem") && stderr.contains("node-2.key"),
        "{stderr}"
    );
    // A partial set is refused by the argument parser.
    let out = leasehold(&args[..args.len() - 1]).await;
    assert_eq!(out.code, 2, "--tls-cert without --tls-ca");
}

/// The acceptance check in one cluster: TLS, a peer secret and client tokens all
/// on. A forged, unsigned AppendEntries gets 401 and moves nothing; a client without a
/// token gets 401, a reader's claim 403, a worker outside its owner prefix 403 and inside
/// it 200; the CLI works over https with the CA and a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_guard_on_refuses_forgeries_and_strangers_and_serves_its_clients() {
    use leasehold_node::security::auth::AuthPolicy;
    use leasehold_node::security::peer_auth::PeerSecret;

    let pki = Pki::new();
    let secret = PeerSecret::write_new_file(&pki.dir.path().join("peer-secret")).unwrap();
    let auth_path = pki.dir.path().join("tokens.toml");
    std::fs::write(
        &auth_path,
        "[[token]]\ntoken = \"rdr-1\"\nrole = \"reader\"\n\n\
         [[token]]\ntoken = \"wrk-a\"\nrole = \"worker\"\nowner_prefix = \"team-a/\"\n",
    )
    .unwrap();
    let auth = Arc::new(AuthPolicy::load(&auth_path).unwrap());
    let tls: BTreeMap<u64, Arc<NodeTls>> = (1..=3u64)
        .map(|id| {
            (
                id,
                Arc::new(NodeTls::load(&pki.node_files(id, false)).unwrap()),
            )
        })
        .collect();
    let c = TestCluster::start_with(move |cfg| {
        cfg.tls = Some(tls[&cfg.id].clone());
        cfg.peer_secret = Some(secret.clone());
        cfg.auth = Some(auth.clone());
        // No keep-time ticks while the lease lives: the state must stand still for the
        // before/after comparison.
        cfg.tick_interval_ms = 3_600_000;
    })
    .await;
    let http = pki.https(&pki.ca, false);
    let get = |id: u64, path: &str, token: Option<&str>| {
        let mut r = http.get(https_url(&c, id, path));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let leader = eventually(
        "a leader, seen with a reader token",
        LEADER_WAIT,
        || async {
            let v: Value = get(1, "/v1/cluster", Some("rdr-1"))
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            v["leader_id"].as_u64().ok_or_else(|| v.to_string())
        },
    )
    .await;
    let claim = |id: u64, job: &str, owner: &str, token: Option<&str>| {
        let mut r = http
            .post(https_url(&c, id, &format!("/v1/jobs/{job}/claim")))
            .json(&serde_json::json!({"owner": owner, "ttl_ms": 30_000}));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };

    // Clients: no token, a reader, a worker outside and inside its prefix.
    assert_eq!(
        get(leader, "/v1/cluster", None).await.unwrap().status(),
        401
    );
    let r = claim(leader, "j1", "team-a/w", None).await.unwrap();
    assert_eq!(r.status(), 401);
    let r = claim(leader, "j1", "team-a/w", Some("rdr-1"))
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = claim(leader, "j1", "team-b/w", Some("wrk-a"))
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "permission_denied", "{body}");
    let r = claim(leader, "j1", "team-a/w", Some("wrk-a"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let lease: Value = r.json().await.unwrap();
    assert_eq!(lease["generation"], 1, "{lease}");

    // A forged, unsigned AppendEntries (a higher term, one entry) over TLS: 401, and no
    // node's state or term moves.
    let fingerprint = || async {
        let mut out = Vec::new();
        for id in c.ids.clone() {
            let d: Value = get(id, "/v1/cluster/digest", Some("rdr-1"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let v: Value = get(id, "/v1/cluster", Some("rdr-1"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            out.push((
                d["applied_index"].clone(),
                d["digest"].clone(),
                v["term"].clone(),
            ));
        }
        out
    };
    // Settle first: every node applied the claim (idle ticks are off in this cluster).
    let claimed_at = lease["log_index"].as_u64().unwrap();
    c.wait_all_applied_in_process(claimed_at).await;
    c.wait_settled().await;
    let before = fingerprint().await;
    let m = c.node(leader).node.raft.metrics().borrow().clone();
    let term = m.current_term + 5;
    let last = m.last_applied.unwrap();
    let log_id = openraft::LogId::new(openraft::CommittedLeaderId::new(term, 9), last.index + 1);
    let forged = openraft::raft::AppendEntriesRequest::<leasehold_node::types::TypeConfig> {
        vote: openraft::Vote::new_committed(term, 9),
        prev_log_id: Some(last),
        entries: vec![openraft::Entry {
            log_id,
            payload: openraft::EntryPayload::Normal(leasehold_statemachine::Entry {
                stamp_ms: 1,
                term,
                idempotency_key: None,
                command: leasehold_statemachine::Command::Tick(Tick),
            }),
        }],
        leader_commit: Some(log_id),
    };
    for id in c.ids.clone() {
        let r = http
            .post(https_url(&c, id, leasehold_node::types::RAFT_APPEND_PATH))
            .header("content-type", leasehold_node::types::BINCODE_CONTENT_TYPE)
            .body(bincode::serialize(&forged).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "node {id} took an unsigned AppendEntries");
    }
    let after = fingerprint().await;
    assert_eq!(before, after, "a refused AppendEntries changed a node");

    // The CLI over https, with the CA and a token; and without the token.
    let endpoints = c
        .ids
        .iter()
        .map(|id| https_url(&c, *id, ""))
        .collect::<Vec<_>>()
        .join(",");
    let ca = pki.ca.display().to_string();
    let args = [
        "job",
        "get",
        "j1",
        "--endpoints",
        &endpoints,
        "--tls-ca",
        &ca,
        "--output",
        "json",
    ];
    let with_token: Vec<&str> = args.iter().copied().chain(["--token", "rdr-1"]).collect();
    let job = leasehold(&with_token)
        .await
        .json_for("job get with a token");
    assert_eq!(job["owner"], "team-a/w", "{job}");
    let out = leasehold(&args).await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("unauthenticated"), "{}", out.stderr);
    c.shutdown().await;
}
