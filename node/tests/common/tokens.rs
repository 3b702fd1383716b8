//! The client tokens of the auth tests (`serve --auth-file`, issue 7 part 2): one auth
//! file of every role, owner prefix and tenant scope, and a three-node cluster that
//! loads it from disk (`TestCluster::start_with_tokens`). Shared by node/tests/api/client_auth.rs
//! (what the nodes enforce) and cli/tests/cli/client_auth.rs (what the binary sends).
//!
//! May import: `leasehold_node`.

use std::collections::BTreeMap;
use std::sync::Arc;

use std::path::Path;

use leasehold_node::security::auth::AuthPolicy;

/// Admin of the whole cluster.
pub const ADMIN: &str = "adm-7f3e";
/// Worker bound to owners `team-a/…`.
pub const TEAM_A: &str = "wrk-a-91c2";
/// Worker bound to owners `team-b/…`.
pub const TEAM_B: &str = "wrk-b-5d08";
/// Worker without an owner prefix.
pub const ANY_WORKER: &str = "wrk-any-33aa";
pub const READER: &str = "rdr-0b44";
/// Worker scoped to queues `team-a`, `team-a-*` and job ids `team-a/…`.
pub const TENANT_A: &str = "ten-a-4e1f";
/// Worker scoped to queue `team-b` and job ids `team-b/…`.
pub const TENANT_B: &str = "ten-b-8c3d";
/// Admin scoped to queue `team-a` and job ids `team-a/…`.
pub const TENANT_A_ADMIN: &str = "adm-a-21d7";

pub const AUTH_FILE: &str = r#"
[[token]]
token = "adm-7f3e"
role = "admin"

[[token]]
token = "wrk-a-91c2"
role = "worker"
owner_prefix = "team-a/"
name = "team a"

[[token]]
token = "wrk-b-5d08"
role = "worker"
owner_prefix = "team-b/"

[[token]]
token = "wrk-any-33aa"
role = "worker"

[[token]]
token = "rdr-0b44"
role = "reader"

[[token]]
token = "ten-a-4e1f"
role = "worker"
owner_prefix = "team-a/"
queues = ["team-a", "team-a-*"]
job_prefix = "team-a/"
name = "tenant a"

[[token]]
token = "ten-b-8c3d"
role = "worker"
owner_prefix = "team-b/"
queues = ["team-b"]
job_prefix = "team-b/"

[[token]]
token = "adm-a-21d7"
role = "admin"
queues = ["team-a"]
job_prefix = "team-a/"
"#;

/// A token only node `id`'s file lists (a worker's), so a test can tell which node
/// checked a forwarded request.
pub fn node_only_token(id: u64) -> String {
    format!("only-n{id}")
}

/// Each node's policy, loaded from its own file under `dir`: [`AUTH_FILE`] plus one token
/// of its own ([`node_only_token`]).
pub fn policies(dir: &Path) -> BTreeMap<u64, Arc<AuthPolicy>> {
    let mut policies = BTreeMap::new();
    for id in 1..=3u64 {
        let path = dir.join(format!("auth-{id}.toml"));
        let own = format!(
            "\n[[token]]\ntoken = \"{}\"\nrole = \"worker\"\n",
            node_only_token(id)
        );
        std::fs::write(&path, format!("{AUTH_FILE}{own}")).unwrap();
        policies.insert(id, Arc::new(AuthPolicy::load(&path).unwrap()));
    }
    policies
}
