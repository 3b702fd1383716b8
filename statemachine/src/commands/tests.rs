//! Requests become commands (`into_command`, `requests.rs`): the JSON checks
//! made at that boundary only — size, depth, `null` — and the form each request picks.
//!
//! May import: `command`, `commands`, `limits`, `wire`.

use crate::commands::list::Command;
use crate::commands::submit::Submit;
use crate::limits;
use crate::wire::{CompleteRequest, ErrorCode, SubmitRequest};

#[test]
fn oversized_payload_is_413() {
    let body = format!(
        r#"{{"payload":"{}"}}"#,
        "x".repeat(limits::PAYLOAD_BYTES_MAX)
    );
    let req: SubmitRequest = serde_json::from_str(&body).unwrap();
    assert_eq!(
        req.into_command().unwrap_err().code,
        ErrorCode::PayloadTooLarge
    );
}

fn deep(depth: usize) -> String {
    format!(
        "{}1{}",
        "[{\"k\":".repeat(depth / 2),
        "}]".repeat(depth / 2)
    )
}

#[test]
fn payload_nested_past_json_depth_max_is_refused() {
    let submit = |depth| {
        let body = format!(r#"{{"payload":{}}}"#, deep(depth));
        serde_json::from_str::<SubmitRequest>(&body)
            .unwrap()
            .into_command()
    };
    assert!(submit(limits::JSON_DEPTH_MAX).is_ok());
    let e = submit(limits::JSON_DEPTH_MAX + 2).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("JSON_DEPTH_MAX"), "{}", e.message);
}

#[test]
fn result_nested_past_json_depth_max_is_refused() {
    let complete = |depth| {
        let body = format!(r#"{{"owner":"w","generation":1,"result":{}}}"#, deep(depth));
        serde_json::from_str::<CompleteRequest>(&body)
            .unwrap()
            .into_command("j")
    };
    assert!(complete(limits::JSON_DEPTH_MAX).is_ok());
    let e = complete(limits::JSON_DEPTH_MAX + 2).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
}

#[test]
fn null_payload_is_none() {
    let req: SubmitRequest = serde_json::from_str(r#"{"payload":null}"#).unwrap();
    match req.into_command().unwrap() {
        Command::Submit(Submit { payload, queue, .. }) => {
            assert_eq!(payload, None);
            assert_eq!(queue, "default");
        }
        other => panic!("{other:?}"),
    }
}
