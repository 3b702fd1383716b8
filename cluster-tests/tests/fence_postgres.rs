//! The PostgreSQL fence of the Rust client (`leasehold_client::fence::postgres`, issue 34
//! item 3) against a real, throw-away PostgreSQL server (`leasehold_cluster_tests::postgres`):
//! the token rule and idempotency keys, a writer queued on the row lock behind a newer
//! token, and the worked example end to end with a real cluster — worker A claims, stops
//! running past its lease (here: it simply is not run; the SIGSTOP variant with real
//! processes is the Python suite's `test_fence_worked_example`), B claims and writes
//! through the fence; A's completion gets `stale_lease` and its delayed UPDATE is rejected
//! by PostgreSQL. Skips when PostgreSQL is not installed, unless required (CI).

mod common;

use std::time::Duration;

use common::{eventually, Cluster};
use leasehold_client::fence::postgres::{self, fenced_write, FenceError, Written};
use leasehold_client::{ErrorCode, NewJob};
use leasehold_cluster_tests::postgres::PgServer;
use tokio_postgres::{Client, NoTls};

const BOUND: Duration = Duration::from_secs(30);

async fn connect(pg: &PgServer) -> Client {
    let (client, conn) = tokio_postgres::connect(&pg.dsn(), NoTls)
        .await
        .expect("connecting to the test server");
    tokio::spawn(conn);
    client
}

/// A database with the fence's tables and an `invoices` table holding row 42.
async fn database(pg: &PgServer) -> Client {
    let db = connect(pg).await;
    postgres::install(&db).await.unwrap();
    postgres::install(&db).await.expect("install is idempotent");
    db.batch_execute(
        "CREATE TABLE invoices (id int PRIMARY KEY, total int NOT NULL, writer text);
         INSERT INTO invoices VALUES (42, 0, NULL);",
    )
    .await
    .unwrap();
    db
}

/// Sets invoice 42's total and writer through the fence.
async fn write_total(
    db: &mut Client,
    token: u64,
    key: Option<&str>,
    total: i32,
    writer: &str,
) -> Result<Written, FenceError> {
    let writer = writer.to_owned();
    fenced_write(db, "invoice-42", token, key, move |tx| {
        Box::pin(async move {
            let sql = "UPDATE invoices SET total = $1, writer = $2 WHERE id = 42";
            tx.execute(sql, &[&total, &writer]).await?;
            Ok(())
        })
    })
    .await
}

async fn row(db: &Client) -> (i32, Option<String>) {
    let r = db
        .query_one("SELECT total, writer FROM invoices WHERE id = 42", &[])
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

async fn keys(db: &Client) -> i64 {
    let r = db
        .query_one("SELECT count(*) FROM leasehold_fence_idempotency", &[])
        .await
        .unwrap();
    r.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_happens_only_with_a_token_not_older_than_the_highest() {
    let Some(pg) = PgServer::start() else { return };
    let mut db = database(&pg).await;
    assert_eq!(
        postgres::highest_token(&db, "invoice-42").await.unwrap(),
        None
    );
    let w = write_total(&mut db, 7, Some("k7"), 70, "seven")
        .await
        .unwrap();
    assert_eq!(w, Written::Applied);
    match write_total(&mut db, 6, None, 60, "six").await {
        Err(FenceError::StaleToken { token, highest, .. }) => {
            assert_eq!((token, highest), (6, Some(7)))
        }
        other => panic!("token 6 after 7: {other:?}"),
    }
    assert_eq!(
        row(&db).await,
        (70, Some("seven".into())),
        "the stale write changed nothing"
    );
    // The same lease writes again; a newer one takes over.
    assert_eq!(
        write_total(&mut db, 7, None, 71, "seven").await.unwrap(),
        Written::Applied
    );
    assert_eq!(
        write_total(&mut db, 8, Some("k8"), 80, "eight")
            .await
            .unwrap(),
        Written::Applied
    );
    // A retried write (same key) is dropped.
    let again = write_total(&mut db, 8, Some("k8"), 81, "eight again")
        .await
        .unwrap();
    assert_eq!(again, Written::Duplicate);
    assert_eq!(row(&db).await, (80, Some("eight".into())));
    assert_eq!(keys(&db).await, 2);
    assert_eq!(
        postgres::highest_token(&db, "invoice-42").await.unwrap(),
        Some(8)
    );
    // Refused before sending.
    for (resource, token) in [("", 1), ("invoice-42", 1 << 63)] {
        let r = fenced_write(&mut db, resource, token, None, |_| {
            Box::pin(async { Ok(()) })
        })
        .await;
        assert!(matches!(r, Err(FenceError::Invalid(_))), "{r:?}");
    }
    // A failing write rolls the token back with it.
    let failed = fenced_write(&mut db, "invoice-42", 9, None, |tx| {
        Box::pin(async move {
            tx.execute("UPDATE no_such_table SET x = 1", &[]).await?;
            Ok(())
        })
    })
    .await;
    assert!(matches!(failed, Err(FenceError::Db(_))), "{failed:?}");
    assert_eq!(
        postgres::highest_token(&db, "invoice-42").await.unwrap(),
        Some(8)
    );
}

/// Token 8 holds the resource's row lock (its write is in progress) when token 7 arrives
/// on another connection: 7 waits on the lock, and once 8 commits it is judged against 8
/// and rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_queued_behind_a_newer_token_is_rejected() {
    let Some(pg) = PgServer::start() else { return };
    let setup = database(&pg).await;
    let (mut newer, mut older) = (connect(&pg).await, connect(&pg).await);
    let (locked_tx, locked) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go) = tokio::sync::oneshot::channel::<()>();
    let eight = tokio::spawn(async move {
        fenced_write(&mut newer, "invoice-42", 8, None, move |tx| {
            Box::pin(async move {
                tx.execute(
                    "UPDATE invoices SET total = 80, writer = 'eight' WHERE id = 42",
                    &[],
                )
                .await?;
                let _ = locked_tx.send(());
                let _ = go.await;
                Ok(())
            })
        })
        .await
    });
    tokio::time::timeout(BOUND, locked).await.unwrap().unwrap();
    let seven = tokio::spawn(async move { write_total(&mut older, 7, None, 70, "seven").await });
    // Token 7 reaches the row lock and waits there; then 8 commits.
    eventually("token 7 to wait on the row lock", BOUND, || async {
        let sql = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'";
        let waiting: i64 = setup.query_one(sql, &[]).await.unwrap().get(0);
        if waiting == 1 {
            Ok(())
        } else {
            Err(format!("{waiting} waiting"))
        }
    })
    .await;
    assert!(!seven.is_finished(), "token 7 waits for the row lock");
    go_tx.send(()).unwrap();
    let eight = tokio::time::timeout(BOUND, eight).await.unwrap().unwrap();
    assert_eq!(eight.unwrap(), Written::Applied);
    let seven = tokio::time::timeout(BOUND, seven).await.unwrap().unwrap();
    assert!(
        matches!(
            seven,
            Err(FenceError::StaleToken {
                highest: Some(8),
                ..
            })
        ),
        "{seven:?}"
    );
    assert_eq!(row(&setup).await, (80, Some("eight".into())));
}

/// The worked example (README "Python" and the Rust fence): A's late completion is
/// refused by the store and A's late write by PostgreSQL; B's write stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worked_example_the_late_writer_is_rejected_by_postgres() {
    let Some(pg) = PgServer::start() else { return };
    let mut db = database(&pg).await;
    let cluster = Cluster::start().await;
    let client = cluster.client();
    client
        .submit(&NewJob::new().id("invoice-42"))
        .await
        .unwrap();
    let a = client.claim("invoice-42", "worker-a", 1_000).await.unwrap();
    // A stops running here (paused past its lease): it neither renews nor writes.
    let b = eventually("B to claim once A's lease ran out", BOUND, || {
        let client = client.clone();
        async move {
            client
                .claim("invoice-42", "worker-b", 30_000)
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await;
    assert_eq!((a.token(), b.token()), (1, 2));
    let w = write_total(&mut db, b.token(), Some("b-total"), 120, "worker-b").await;
    assert_eq!(w.unwrap(), Written::Applied);
    // A resumes while B still holds the job.
    let e = a.complete(None).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::StaleLease), "{e}");
    let late = write_total(&mut db, a.token(), Some("a-total"), 100, "worker-a").await;
    assert!(
        matches!(
            late,
            Err(FenceError::StaleToken {
                token: 1,
                highest: Some(2),
                ..
            })
        ),
        "{late:?}"
    );
    assert_eq!(row(&db).await, (120, Some("worker-b".into())));
    b.complete(None).await.unwrap();
    cluster.shutdown().await;
}
