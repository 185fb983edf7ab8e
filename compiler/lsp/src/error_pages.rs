//! Where a diagnostic's code links to: the URL of a copy of `docs/errors/`, chosen once
//! at `initialize`. Amp declares no web site, so the default is a local copy:
//! 1. the client's `initializationOptions.docsBaseUrl` (VS Code's `amp.docs.baseUrl`,
//!    or the pages the extension bundles); an empty string turns links off;
//! 2. else `docs/errors/` of the workspace root, when the root is an Amp checkout;
//! 3. else no link (the code is still shown, and `docs/errors/<CODE>.md` is its page).

use crate::convert::{file_uri, path_of_file_uri};
use serde_json::Value;
use std::path::PathBuf;

/// The base URL for error pages given the `initialize` parameters.
pub fn error_pages_base(initialize_params: &Value) -> Option<String> {
    if let Some(base) = initialize_params.pointer("/initializationOptions/docsBaseUrl").and_then(Value::as_str) {
        return (!base.trim().is_empty()).then(|| base.trim().to_string());
    }
    let root = workspace_root(initialize_params)?;
    let pages = root.join("docs").join("errors");
    // One page every checkout has: the index.
    if !pages.join("README.md").is_file() {
        return None;
    }
    file_uri(&pages).map(|uri| uri.as_str().to_string())
}

/// The first workspace folder, else `rootUri`, else `rootPath`, as a local path.
fn workspace_root(params: &Value) -> Option<PathBuf> {
    let uri = params
        .pointer("/workspaceFolders/0/uri")
        .and_then(Value::as_str)
        .or_else(|| params.get("rootUri").and_then(Value::as_str));
    match uri {
        Some(uri) => path_of_file_uri(uri),
        None => params.get("rootPath").and_then(Value::as_str).map(PathBuf::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_client_option_wins_and_an_empty_one_turns_links_off() {
        let params =
            json!({ "initializationOptions": { "docsBaseUrl": "https://amp.example/errors/" }, "rootUri": null });
        assert_eq!(error_pages_base(&params).as_deref(), Some("https://amp.example/errors/"));
        let off = json!({ "initializationOptions": { "docsBaseUrl": "" }, "rootPath": env!("CARGO_MANIFEST_DIR") });
        assert_eq!(error_pages_base(&off), None);
    }

    #[test]
    fn an_amp_checkout_as_workspace_links_to_its_own_pages() {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository");
        let uri = file_uri(&repo).expect("utf-8 path");
        let base = error_pages_base(&json!({ "rootUri": uri.as_str() })).expect("docs/errors exists");
        assert_eq!(base, format!("{}/docs/errors", uri.as_str()));
        let folders =
            json!({ "workspaceFolders": [{ "uri": uri.as_str(), "name": "amp" }], "rootUri": "file:///nowhere" });
        assert_eq!(error_pages_base(&folders), Some(base));
        assert_eq!(error_pages_base(&json!({ "rootUri": "file:///nowhere" })), None);
        assert_eq!(error_pages_base(&json!({})), None);
    }
}
