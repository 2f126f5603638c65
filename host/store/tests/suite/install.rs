//! Installs the store refuses, as whoever prints the error whole shows them.

use bx_store::{Digest, InstallOptions, InstallSource, Store, StoreError};

use super::{repo, whole_chain};

/// A core module is refused as not a component, and the refusal printed with its whole
/// chain names the runtime's reason once (it named it twice: "refused component: X: X",
/// the store's message holding its cause and exposing it as its source too). Nothing is
/// written.
#[test]
fn a_core_module_is_refused_naming_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = bx_state::StateDir::at(dir.path());
    let store = Store::open(&state, &bx_state::Config::default()).unwrap();
    let runtime = bx_runtime::Runtime::new(bx_runtime::Limits::default()).unwrap();
    let path = repo().join("fixtures/components/core-module.wasm");
    let digest = Digest::of(&std::fs::read(&path).unwrap());
    let refused = store
        .install(
            &runtime,
            &InstallSource::File(path),
            &digest,
            &InstallOptions::default(),
            &mut |_, _| {},
        )
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::Component(bx_runtime::RunError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(refused.runbook(), Some("docs/runbook.md#install-refused"));
    let shown = whole_chain(&refused);
    assert!(shown.starts_with("refused component: not a valid component: "), "{shown}");
    assert_eq!(shown.matches("not a valid component").count(), 1, "{shown}");
    assert!(store.installed().unwrap().tools.is_empty());
}

/// A name its tools cannot have is a refusal of its own, not a component the runtime
/// refused ("refused component: not a component bx can run: tool name …").
#[test]
fn a_bad_tool_name_is_its_own_refusal() {
    let refused = StoreError::BadName("Not A Name!".into());
    assert_eq!(
        refused.to_string(),
        "tool name \"Not A Name!\" must be 1 to 64 characters of a-z, 0-9, '.', '_' or '-'"
    );
    assert_eq!(refused.runbook(), Some("docs/runbook.md#install-refused"));
    assert!(std::error::Error::source(&refused).is_none());
}
