//! One lease of a batch renew or complete ([`LeaseItem`]) and the check of a batch's
//! leases, shared by `renew_many.rs` and `complete_many.rs`.
//!
//! May import: `limits`, `wire`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::limits;
use crate::wire::{json_text, ApiError};

/// One lease of a `RenewMany` or `CompleteMany`: the job, the generation its holder
/// presents, and the JSON text the single call would carry (renew: `progress`;
/// complete: `result`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseItem {
    pub job_id: String,
    pub generation: u64,
    pub json: Option<String>,
}

impl LeaseItem {
    /// The `i`th lease of a batch request, its JSON text (`what`) checked as the
    /// single call's would be.
    pub(crate) fn from_request(
        i: usize,
        what: &str,
        job_id: String,
        generation: u64,
        raw: Option<Box<RawValue>>,
    ) -> Result<LeaseItem, ApiError> {
        let json = json_text(&format!("leases[{i}].{what}"), raw)?;
        Ok(LeaseItem {
            job_id,
            generation,
            json,
        })
    }

    pub(crate) fn example(json: &str) -> Vec<LeaseItem> {
        vec![LeaseItem {
            job_id: "j".into(),
            generation: 7,
            json: Some(json.into()),
        }]
    }
}

/// A client batch's leases: 1 to [`limits::BATCH_LEASES_MAX`], each with a valid job id
/// and JSON text. One bad item refuses the whole request, naming it: bad input changes
/// nothing.
pub(crate) fn validate_lease_items(
    leases: &[LeaseItem],
    json_ok: impl Fn(&str) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    limits::validate_batch_leases(leases.len())?;
    for (i, item) in leases.iter().enumerate() {
        let checked = limits::validate_job_id(&item.job_id)
            .and_then(|()| item.json.as_deref().map_or(Ok(()), &json_ok));
        checked.map_err(|e| ApiError::new(e.code, format!("leases[{i}]: {}", e.message)))?;
    }
    Ok(())
}
