//! Every `serve` and `dev` flag (the clap definition) is named in `docs/api.md`'s served
//! part ("serve flags"): a new flag fails here until the reference describes it. The
//! routes, codes and metrics are checked against the same page by node/tests/docs_api.rs.

use clap::CommandFactory;

use crate::common::api_md::reference;

#[test]
fn every_serve_and_dev_flag_is_documented() {
    let doc = reference();
    let cli = leasehold_cli::Cli::command();
    let mut missing = Vec::new();
    for name in ["serve", "dev"] {
        let sub = cli
            .find_subcommand(name)
            .unwrap_or_else(|| panic!("`leasehold {name}` exists"));
        for long in sub.get_arguments().filter_map(|a| a.get_long()) {
            let flag = format!("`--{long}");
            let named = [format!("{flag}`"), format!("{flag} ")]
                .iter()
                .any(|f| doc.contains(f.as_str()));
            if !named && long != "help" {
                missing.push(format!("{name} --{long}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags docs/api.md (\"serve flags\") does not name: {missing:#?}"
    );
}
