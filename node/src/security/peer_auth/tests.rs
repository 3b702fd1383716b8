//! The peer-auth header, secret and guard, tested together.

use std::path::Path;

use super::secret::new_private_file;
use super::*;
use crate::types::NodeId;

const PATH: &str = "/raft/append";
const NOW: u64 = 1_764_450_000_000;
const ME: NodeId = 1;

fn secret() -> PeerSecret {
    PeerSecret::from_bytes(&[7u8; PEER_SECRET_BYTES_MIN])
}

fn cluster() -> Option<ClusterId> {
    Some(ClusterId::from([1; CLUSTER_ID_BYTES]))
}

fn env(t_ms: u64) -> Envelope {
    Envelope {
        t_ms,
        from: 2,
        to: ME,
        cluster: cluster(),
        boot: 0x0123_4567_89ab_cdef,
        seq: 5,
    }
}

fn signed(body: &[u8]) -> String {
    sign(Some(&secret()), "POST", PATH, &env(NOW), body)
}

/// The head check, then the body check, as the node runs them.
fn check(header: &str, path: &str, body: &[u8], now: u64) -> Result<Option<Stamp>, PeerAuthError> {
    let head = Head {
        method: "POST",
        path,
        header: Some(header),
        content_length: Some(body.len() as u64),
    };
    let stamp = check_head(Some(&secret()), &head, ME, now)?;
    check_body(stamp.as_ref().unwrap(), body)?;
    Ok(stamp)
}

#[test]
fn a_good_mac_is_accepted_and_names_sender_run_and_cluster() {
    let s = check(&signed(b"body"), PATH, b"body", NOW)
        .unwrap()
        .unwrap();
    assert_eq!(s.env, env(NOW));
    assert_eq!(s.len, 4);
}

#[test]
fn a_tampered_field_path_or_method_is_refused_by_the_head_check() {
    let h = signed(b"body");
    let bad_mac = Err(PeerAuthError::BadMac { from: 2 });
    assert_eq!(check(&h, "/raft/vote", b"body", NOW), bad_mac);
    let head = Head {
        method: "PUT",
        path: PATH,
        header: Some(&h),
        content_length: Some(4),
    };
    assert_eq!(check_head(Some(&secret()), &head, ME, NOW), bad_mac);
    let s = Stamp::parse(&h).unwrap();
    let digest = hex_encode(&s.body_sha256);
    for (from, to) in [
        (format!("t={NOW}"), format!("t={}", NOW + 1)),
        (cluster().unwrap().to_string(), "02".repeat(16)),
        ("to=1".into(), "to=3".into()),
        ("boot=0123".into(), "boot=0124".into()),
        ("seq=5".into(), "seq=6".into()),
        ("len=4".into(), "len=5".into()),
        (digest[..4].to_owned(), "0000".into()),
    ] {
        let t = h.replace(&from, &to);
        assert_ne!(t, h, "{from}");
        let head = Head {
            method: "POST",
            path: PATH,
            header: Some(&t),
            content_length: Some(5),
        };
        assert_eq!(check_head(Some(&secret()), &head, ME, NOW), bad_mac, "{to}");
    }
    let from = h.replace("from=2", "from=3");
    assert_eq!(
        check(&from, PATH, b"body", NOW),
        Err(PeerAuthError::BadMac { from: 3 })
    );
}

#[test]
fn another_body_of_the_same_length_passes_the_head_and_fails_the_digest() {
    let h = signed(b"body");
    assert_eq!(
        check(&h, PATH, b"bodY", NOW),
        Err(PeerAuthError::BodyDigest)
    );
}

#[test]
fn content_length_must_be_the_headers_len() {
    let h = signed(b"body");
    for content_length in [None, Some(3), Some(1_000_000)] {
        let head = Head {
            method: "POST",
            path: PATH,
            header: Some(&h),
            content_length,
        };
        assert_eq!(
            check_head(Some(&secret()), &head, ME, NOW),
            Err(PeerAuthError::Length {
                len: 4,
                content_length
            })
        );
    }
}

#[test]
fn a_request_for_another_node_is_refused() {
    let h = signed(b"b");
    let head = Head {
        method: "POST",
        path: PATH,
        header: Some(&h),
        content_length: Some(1),
    };
    assert_eq!(
        check_head(Some(&secret()), &head, 3, NOW),
        Err(PeerAuthError::WrongTarget { to: ME, me: 3 })
    );
}

#[test]
fn another_secret_is_refused() {
    let other = PeerSecret::from_bytes(&[8u8; PEER_SECRET_BYTES_MIN]);
    let h = sign(Some(&other), "POST", PATH, &env(NOW), b"body");
    assert_eq!(
        check(&h, PATH, b"body", NOW),
        Err(PeerAuthError::BadMac { from: 2 })
    );
}

#[test]
fn the_window_is_inclusive_and_one_past_it_is_refused() {
    let h = signed(b"b");
    for now in [NOW - PEER_AUTH_WINDOW_MS, NOW + PEER_AUTH_WINDOW_MS] {
        assert!(check(&h, PATH, b"b", now).is_ok(), "at the window's edge");
    }
    for now in [NOW - PEER_AUTH_WINDOW_MS - 1, NOW + PEER_AUTH_WINDOW_MS + 1] {
        assert!(
            matches!(
                check(&h, PATH, b"b", now),
                Err(PeerAuthError::Expired { .. })
            ),
            "one past the window"
        );
    }
}

#[test]
fn missing_unsigned_malformed_and_v1_headers_are_refused_with_a_secret() {
    let head = Head {
        method: "POST",
        path: PATH,
        header: None,
        content_length: Some(0),
    };
    assert_eq!(
        check_head(Some(&secret()), &head, ME, NOW),
        Err(PeerAuthError::Missing)
    );
    let unsigned = sign(None, "POST", PATH, &env(NOW), b"");
    assert_eq!(
        check(&unsigned, PATH, b"", NOW),
        Err(PeerAuthError::Unsigned)
    );
    let good = signed(b"");
    for h in [
        String::new(),
        format!("v1 t={NOW} from=2 cluster=- mac={}", "00".repeat(32)),
        good.replace("v2 ", "v3 "),
        good.replace(" seq=5", ""),
        good.replace(" seq=5", " seq=5 seq=5"),
        good.replace("seq=5", "seq=x"),
        good.replace("boot=0123456789abcdef", "boot=0123"),
        good.replace(" mac=", " mac=ab"),
        format!("{good} extra=1"),
    ] {
        let r = check(&h, PATH, b"", NOW);
        assert!(
            matches!(r, Err(PeerAuthError::Malformed(_))),
            "{h:?}: {r:?}"
        );
    }
    let v1 = Stamp::parse(&format!("v1 t={NOW}"))
        .unwrap_err()
        .to_string();
    assert!(v1.contains("same Leasehold version"), "{v1}");
}

#[test]
fn without_a_secret_anything_well_formed_passes_and_no_header_too() {
    let head = |header| Head {
        method: "POST",
        path: PATH,
        header,
        content_length: Some(0),
    };
    assert_eq!(check_head(None, &head(None), ME, NOW), Ok(None));
    let h = sign(None, "POST", PATH, &env(0), b"");
    let s = check_head(None, &head(Some(&h)), 9, NOW).unwrap().unwrap();
    assert_eq!((s.env.from, s.env.cluster, s.mac), (2, cluster(), None));
    assert!(check_head(None, &head(Some("garbage")), ME, NOW).is_err());
}

/// Seeded: the header is attacker-controlled text, so no input may panic or pass.
#[test]
fn random_headers_never_panic_and_never_verify() {
    use rand::{Rng, SeedableRng};
    const SEED: u64 = 7;
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    let good = signed(b"b");
    for _ in 0..5_000 {
        let mut h: Vec<u8> = good.bytes().collect();
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(0..h.len());
            h[i] = rng.gen_range(b' '..=b'~');
        }
        let h = String::from_utf8(h).unwrap();
        if h != good {
            let r = check(&h, PATH, b"b", NOW);
            assert!(
                r.is_err() || Stamp::parse(&h) == Stamp::parse(&good),
                "seed {SEED}: {h:?}"
            );
        }
    }
}

#[test]
fn the_header_round_trips() {
    let s = Stamp::parse(&signed(b"x")).unwrap();
    assert_eq!(Stamp::parse(&s.render()).unwrap(), s);
    assert!(s.mac.is_some());
    let unsigned = Stamp::new(env(NOW), b"x");
    assert_eq!(Stamp::parse(&unsigned.render()).unwrap(), unsigned);
}

fn guard(dir: &Path) -> PeerGuard {
    let clock = crate::time::clock::SystemClock::skewed(0, 1.0).shared();
    PeerGuard::new(ME, Some(secret()), clock, dir.to_owned(), cluster())
}

/// The node's head check: each signed header is accepted once; one stamped long
/// before this node started is refused.
#[test]
fn the_guard_accepts_a_header_once_and_refuses_one_from_before_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let g = guard(dir.path());
    let now = g.clock.wall_ms();
    let head_of = |h: &str| -> Result<Option<Stamp>, PeerAuthError> {
        g.check_head(&Head {
            method: "POST",
            path: PATH,
            header: Some(h),
            content_length: Some(1),
        })
    };
    let h = sign(Some(&secret()), "POST", PATH, &env(now), b"b");
    assert!(head_of(&h).unwrap().is_some());
    assert!(matches!(
        head_of(&h),
        Err(PeerAuthError::Replay {
            why: crate::security::peer_replay::Replay::Duplicate,
            ..
        })
    ));
    let old = now - PEER_RESTART_SLACK_MS - 1_000;
    let h = sign(Some(&secret()), "POST", PATH, &env(old), b"b");
    assert!(matches!(
        head_of(&h),
        Err(PeerAuthError::BeforeStart { .. })
    ));
    // The guard's own stamps number each target's requests from 1.
    let seqs: Vec<u64> = [2, 2, 3, 2]
        .iter()
        .map(|&to| Stamp::parse(&g.stamp(to, PATH, b"")).unwrap().env.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 1, 3]);
}

#[test]
fn cluster_ids_round_trip_through_hex_and_json() {
    let id = ClusterId::random();
    assert_eq!(ClusterId::from_hex(&id.to_string()), Ok(id));
    let json = serde_json::to_string(&id).unwrap();
    assert_eq!(serde_json::from_str::<ClusterId>(&json).unwrap(), id);
    assert_eq!(
        ClusterId::from_hex("abc").unwrap_err().to_string(),
        "bad cluster id \"abc\": expected 32 hex digits"
    );
    assert_eq!(hex_decode("00fFa9"), Some(vec![0, 0xff, 0xa9]));
    for bad in ["+f", "0", "zz", "éé"] {
        assert_eq!(hex_decode(bad), None, "{bad:?}");
    }
    assert!(ClusterId::from_hex(&"0".repeat(34)).is_err());
}

#[test]
fn the_cluster_check_refuses_another_or_no_cluster_and_adopts_only_when_fresh() {
    let (a, b) = (ClusterId::from([1; 16]), ClusterId::from([2; 16]));
    assert_eq!(
        check_cluster(Some(a), Some(a), true, false),
        ClusterCheck::Accept
    );
    let refused = check_cluster(Some(a), Some(b), false, true);
    assert!(
        matches!(&refused, ClusterCheck::Refuse(m) if m.contains(&a.to_string()) && m.contains(&b.to_string())),
        "{refused:?}"
    );
    assert!(matches!(
        check_cluster(Some(a), None, true, true),
        ClusterCheck::Refuse(_)
    ));
    assert_eq!(
        check_cluster(None, Some(b), true, true),
        ClusterCheck::Adopt(b)
    );
    assert_eq!(
        check_cluster(None, Some(b), false, true),
        ClusterCheck::Accept,
        "votes never adopt"
    );
    assert!(matches!(
        check_cluster(None, Some(b), true, false),
        ClusterCheck::Refuse(_)
    ));
    assert_eq!(check_cluster(None, None, true, false), ClusterCheck::Accept);
}

#[test]
fn secret_files_must_be_long_enough_and_not_world_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    let s = PeerSecret::write_new_file(&path).unwrap();
    assert_eq!(s.key().len(), 2 * PEER_SECRET_GENERATED_BYTES);
    assert!(
        PeerSecret::write_new_file(&path).is_err(),
        "never overwrites"
    );
    let short = dir.path().join("short");
    write_private(
        &short,
        &format!("{}\n", "x".repeat(PEER_SECRET_BYTES_MIN - 1)),
    );
    let err = PeerSecret::read_file(&short).unwrap_err().to_string();
    assert!(err.contains("31 bytes") && err.contains("short"), "{err}");
    let exact = dir.path().join("exact");
    write_private(
        &exact,
        &format!("  {}\n", "x".repeat(PEER_SECRET_BYTES_MIN)),
    );
    assert_eq!(
        PeerSecret::read_file(&exact).unwrap().key().len(),
        PEER_SECRET_BYTES_MIN
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exact, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = PeerSecret::read_file(&exact).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }
    let missing = PeerSecret::read_file(&dir.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("nope"), "{missing}");
}

fn write_private(path: &Path, text: &str) {
    use std::io::Write;
    new_private_file(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}
