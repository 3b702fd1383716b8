//! The log's types between versions, and the command descriptors (issue 29 items 2, 4).
//!
//! Golden bytes: one instance of every `Command` variant and of an `Entry`, as bincode
//! writes them. The WAL, snapshots and Raft RPC between two versions of the node decode
//! these bytes, so an old variant's encoding must never change: `Command` is append-only
//! (the module doc of `commands/mod.rs`). A failure here means a rolling upgrade from the
//! previous release would break — add a new variant at the end instead.
//!
//! Descriptors: every variant has one, in variant order, consistent with what it names;
//! a new variant fails here until it is listed (`commands::one_of_each`).

use leasehold_statemachine::commands::one_of_each;
use leasehold_statemachine::commands::{
    ActivateVersion, ActivateVersionIn, Cancel, ClaimNextMany, CompleteMany, Delete, Fail, Redrive,
    ReleaseWith, RenewMany, RenewWith, Retry, SubmitWith, Tick,
};
use leasehold_statemachine::{
    BatchItem, Command, CommandScope, Entry, Operation, DESCRIPTORS, ENTRY_VERSION_MAX,
};
use serde::de::{self, Deserialize, Deserializer, Visitor};

/// `one_of_each()`, encoded (hex), in variant order. Never edit a line: append one.
const GOLDEN: [&str; 22] = [
    "000000000101000000000000006a0100000000000000710102000000000000007b7d010300000000000000",
    "0100000001000000000000006a01000000000000006fe803000000000000",
    "0200000001000000000000007101000000000000006fe803000000000000",
    "0300000001000000000000006a01000000000000006f070000000000000001d007000000000000",
    "0400000001000000000000006a01000000000000006f070000000000000001010000000000000031",
    "0500000001000000000000006a01000000000000006f0700000000000000",
    "0600000001000000000000006a",
    "07000000",
    "0800000001000000000000000101000000000000006b0600000001000000000000006a",
    "0900000002000000",
    "0a000000010100000000000000000000000100000000000000710101000000000000006a0600000001000000000000006a",
    // Entry version 4 (docs/api.md "Version 1.1").
    "0b0000000101000000000000006a0100000000000000710102000000000000007b7d010300000000000000018813000000000000f9ffffffe80300000000000060ea000000000000",
    "0c00000001000000000000006a01000000000000006f070000000000000001d007000000000000010a000000000000007b2273746570223a327d",
    "0d00000001000000000000006a01000000000000006f070000000000000001f40100000000000001010400000000000000626f6f6d",
    "0e00000001000000000000006a01000000000000006f0700000000000000010400000000000000626f6f6d",
    "0f00000001000000000000006a01010000000000000072",
    "1000000001000000000000006a012823000000000000",
    "110000000100000000000000710a000000",
    // Entry version 6 (docs/api.md "Batches").
    "1200000001000000000000007101000000000000006fe80300000000000040000000",
    "1300000001000000000000006f01d007000000000000010000000000000001000000000000006a0700000000000000010a000000000000007b2273746570223a327d",
    "1400000001000000000000006f010000000000000001000000000000006a070000000000000001010000000000000031",
    // Entry version 8 (issue 44 item 5): the activation naming its membership.
    "1500000008000000030000000000000001000000000000002a00000000000000",
];

/// `Entry { stamp_ms: 5, term: 2, idempotency_key: Some("k"), command: Tick }`.
const GOLDEN_ENTRY: &str = "050000000000000002000000000000000101000000000000006b07000000";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn every_command_variant_encodes_and_decodes_as_the_previous_release() {
    let all = one_of_each();
    assert_eq!(all.len(), GOLDEN.len(), "a new variant needs a golden line");
    for (cmd, golden) in all.iter().zip(GOLDEN) {
        assert_eq!(hex(&bincode::serialize(cmd).unwrap()), golden, "{cmd:?}");
        let decoded: Command = bincode::deserialize(&unhex(golden)).unwrap();
        assert_eq!(&decoded, cmd);
    }
    let entry = Entry {
        stamp_ms: 5,
        term: 2,
        idempotency_key: Some("k".into()),
        command: Command::Tick(Tick),
    };
    assert_eq!(hex(&bincode::serialize(&entry).unwrap()), GOLDEN_ENTRY);
    assert_eq!(
        bincode::deserialize::<Entry>(&unhex(GOLDEN_ENTRY)).unwrap(),
        entry
    );
}

/// The variant names serde's derive hands a deserializer: the whole list, whatever was
/// built — so a variant added without an instance in `one_of_each` is counted here.
fn command_variants() -> &'static [&'static str] {
    struct Introspect<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Introspect<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not an enum"))
        }
        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = variants;
            Err(de::Error::custom("introspected"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            struct identifier ignored_any
        }
    }
    let mut variants: &'static [&'static str] = &[];
    let _ = Command::deserialize(Introspect(&mut variants));
    variants
}

#[test]
fn every_variant_has_an_instance_and_a_descriptor_in_variant_order() {
    let variants = command_variants();
    let all = one_of_each();
    assert_eq!(
        variants.len(),
        all.len(),
        "one_of_each misses one of {variants:?}"
    );
    assert_eq!(DESCRIPTORS.len(), all.len(), "DESCRIPTORS misses one");
    for (i, cmd) in all.iter().enumerate() {
        let index = u32::from_le_bytes(bincode::serialize(cmd).unwrap()[..4].try_into().unwrap());
        assert_eq!(index as usize, i, "{cmd:?} is listed at its variant index");
        if let Command::Scoped(scoped) = cmd {
            // What it carries is what it is; only its entry version is its own.
            assert_eq!(cmd.facts(), scoped.command.facts());
            assert_eq!(cmd.since(), DESCRIPTORS[i].since.number());
            continue;
        }
        assert_eq!(cmd.descriptor(), &DESCRIPTORS[i], "{cmd:?}");
        assert_eq!(cmd.kind(), DESCRIPTORS[i].name);
    }
    // A name is one command: two descriptors share it only as that command's forms at
    // two entry versions (version 1.1's submit, renew and release with more fields),
    // alike in all but `since`.
    for (i, a) in DESCRIPTORS.iter().enumerate() {
        for b in &DESCRIPTORS[i + 1..] {
            if a.name == b.name {
                assert_ne!(a.since, b.since, "{} listed twice", a.name);
                let same =
                    |d: &leasehold_statemachine::Descriptor| (d.operation, d.scope, d.outcomes);
                assert_eq!(same(a), same(b), "{}'s forms differ", a.name);
            }
        }
    }
}

/// Fail closed: a command's scope rule covers everything it names, and an internal rule
/// goes with an internal operation (only an admin may, and no scoped token).
#[test]
fn every_scope_rule_covers_what_its_command_names() {
    for cmd in one_of_each() {
        let (d, n) = cmd.facts();
        let kind = d.name;
        match d.scope {
            CommandScope::NewJob => assert!(n.queue.is_some(), "{kind}: creates in a queue"),
            CommandScope::Queue => assert!(n.queue.is_some() && n.job_id.is_none(), "{kind}"),
            CommandScope::StoredJob(_) => {
                assert!(n.job_id.is_some() && n.queue.is_none(), "{kind}")
            }
            CommandScope::Items => assert!(!cmd.items().is_empty(), "{kind}: carries commands"),
            CommandScope::Leases => assert!(
                !n.leases.is_empty() && n.job_id.is_none() && n.queue.is_none(),
                "{kind}: acts on the leases it lists"
            ),
            CommandScope::Internal => assert_eq!(d.operation, Operation::Internal, "{kind}"),
        }
        if n.job_id.is_some() {
            assert!(
                matches!(d.scope, CommandScope::NewJob | CommandScope::StoredJob(_)),
                "{kind} names a job: its rule must check it"
            );
        }
        if !cmd.items().is_empty() {
            assert_eq!(d.scope, CommandScope::Items, "{kind}");
        }
        if !n.leases.is_empty() {
            assert_eq!(d.scope, CommandScope::Leases, "{kind}");
        }
        let client = d.operation != Operation::Internal;
        assert_eq!(
            client,
            !d.outcomes.is_empty(),
            "{kind}: client commands report outcomes"
        );
        assert!(d.outcomes.is_empty() || d.outcomes[0] == "ok", "{kind}");
        assert!(
            (1..=ENTRY_VERSION_MAX).contains(&d.since.number()),
            "{kind}: since {:?}",
            d.since
        );
    }
}

#[test]
fn a_batch_needs_the_newest_version_of_its_items() {
    for cmd in one_of_each() {
        let want = match cmd {
            Command::ActivateVersion(ActivateVersion { .. }) => 2,
            Command::Scoped(_) => 3,
            Command::SubmitWith(SubmitWith { .. })
            | Command::RenewWith(RenewWith { .. })
            | Command::ReleaseWith(ReleaseWith { .. })
            | Command::Fail(Fail { .. })
            | Command::Cancel(Cancel { .. })
            | Command::Retry(Retry { .. })
            | Command::Redrive(Redrive { .. }) => 4,
            Command::ClaimNextMany(ClaimNextMany { .. })
            | Command::RenewMany(RenewMany { .. })
            | Command::CompleteMany(CompleteMany { .. }) => 6,
            Command::ActivateVersionIn(ActivateVersionIn { .. }) => 8,
            _ => 1,
        };
        assert_eq!(cmd.since(), want, "{cmd:?}");
        let entry = Entry {
            stamp_ms: 1,
            term: 1,
            idempotency_key: None,
            command: cmd,
        };
        assert_eq!(entry.since(), want);
    }
}

fn batch_of(command: Command) -> Command {
    Command::Batch(vec![BatchItem {
        idempotency_key: None,
        command,
    }])
}

/// Regression (issue 7 part 6, fuzzing): a batch inside a batch is refused while
/// decoding, before its items are read; no state is left behind to refuse the next,
/// valid batch decoded on the same thread (the refusal used to be a thread-local flag).
#[test]
fn a_batch_item_that_is_a_batch_is_refused_while_decoding() {
    let nested = bincode::serialize(&batch_of(batch_of(Command::Tick(Tick)))).unwrap();
    let mut truncated = nested.clone();
    truncated.truncate(4 + 8 + 1 + 4); // cut right after the inner batch's variant index
    for bytes in [&nested, &truncated] {
        let e = bincode::deserialize::<Command>(bytes).unwrap_err();
        assert!(
            e.to_string().contains("a batch item is itself a batch"),
            "{e}"
        );
    }
    for _ in 0..2 {
        let ok = batch_of(Command::Delete(Delete { job_id: "j".into() }));
        let back: Command = bincode::deserialize(&bincode::serialize(&ok).unwrap()).unwrap();
        assert_eq!(back, ok);
        assert!(bincode::deserialize::<Command>(&nested).is_err());
    }
}

/// As a batch in a batch: a scoped command inside a scoped command (or a batch inside
/// one) is refused while decoding, at its variant index, so no depth of nesting is ever
/// decoded recursively.
#[test]
fn a_scoped_command_that_is_scoped_or_a_batch_is_refused_while_decoding() {
    let Some(Command::Scoped(scoped)) = one_of_each()
        .into_iter()
        .find(|c| matches!(c, Command::Scoped(_)))
    else {
        panic!("one_of_each lists a Scoped command")
    };
    for (inner, why) in [
        (Command::Scoped(scoped.clone()), "is itself scoped"),
        (
            batch_of(Command::Tick(Tick)),
            "batch item is itself a batch",
        ),
    ] {
        let nested = Command::Scoped(leasehold_statemachine::ScopedCommand {
            scope: scoped.scope.clone(),
            command: Box::new(inner),
        });
        let e = bincode::deserialize::<Command>(&bincode::serialize(&nested).unwrap());
        let e = e.unwrap_err().to_string();
        assert!(e.contains(why) || e.contains("batch"), "{e}");
    }
    let ok = Command::Scoped(scoped);
    let back: Command = bincode::deserialize(&bincode::serialize(&ok).unwrap()).unwrap();
    assert_eq!(back, ok);
    assert_eq!(back.since(), 3);
}

#[test]
fn json_refuses_a_nested_batch_too() {
    let nested = serde_json::to_string(&batch_of(batch_of(Command::Tick(Tick)))).unwrap();
    let e = serde_json::from_str::<Command>(&nested).unwrap_err();
    assert!(
        e.to_string().contains("a batch item is itself a batch"),
        "{e}"
    );
    let ok = batch_of(Command::Tick(Tick));
    let back: Command = serde_json::from_str(&serde_json::to_string(&ok).unwrap()).unwrap();
    assert_eq!(back, ok);
}
