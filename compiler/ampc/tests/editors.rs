//! docs/editors.md's editor setups work as written, each run headless on a project of two
//! files with this build's `ampc` on `PATH`: Neovim's for 0.7 to 0.10 in `nvim --headless`
//! (Debian's 0.7.2 in CI), Emacs's in `emacs --batch` (Debian's 28.2 with `elpa-eglot`).
//! Where an editor is not installed, its test reports a skip.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The first ```lang block after `heading` in docs/editors.md.
fn block_after(heading: &str, lang: &str) -> String {
    let page = std::fs::read_to_string(repo().join("docs/editors.md")).expect("docs/editors.md");
    let section = page.split(heading).nth(1).unwrap_or_else(|| panic!("`{heading}` in docs/editors.md"));
    let block = section.split(&format!("```{lang}\n")).nth(1).unwrap_or_else(|| panic!("a {lang} block"));
    block.split("\n```").next().expect("a closed block").to_string() + "\n"
}

fn skipped(reason: &str) {
    amp_tests::report_skip(&format!("ampc editors.rs: {reason}"));
}

/// A project in a new folder's `proj/`: `amp.toml`, `shared/encoders.amp` and `tree.amp`
/// (the example model with one mistake, for a diagnostic to show), and the model's text.
fn project() -> (tempfile::TempDir, String) {
    let dir = tempfile::Builder::new().prefix("ampc-editor-").tempdir().expect("temp dir");
    let root = dir.path().join("proj");
    std::fs::create_dir_all(root.join("shared")).expect("folders");
    std::fs::write(root.join("amp.toml"), "").expect("marker");
    let encoders = std::fs::read_to_string(repo().join("examples/shared/encoders.amp")).expect("example");
    std::fs::write(root.join("shared/encoders.amp"), encoders).expect("written");
    let model = std::fs::read_to_string(repo().join("examples/sentiment_tree.amp")).expect("example");
    let model = model.replace("head(h) }", "head(h) + foo }");
    std::fs::write(root.join("tree.amp"), &model).expect("written");
    (dir, model)
}

/// `PATH` with this build's `ampc` first.
fn path_with_ampc() -> std::ffi::OsString {
    let ampc_dir = Path::new(env!("CARGO_BIN_EXE_ampc")).parent().expect("a folder").to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(ampc_dir).chain(std::env::split_paths(&rest))).expect("PATH")
}

/// (line, UTF-16 column) of the first `needle` in `text`, plus `delta` bytes.
fn position(text: &str, needle: &str, delta: usize) -> (usize, usize) {
    let offset = text.find(needle).unwrap_or_else(|| panic!("`{needle}`")) + delta;
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count(), before[line_start..].encode_utf16().count())
}

/// Waits for the client and the diagnostics, then reads what the setup shows and asks
/// the server for a hover and a rename; writes it all as JSON to `out`.
fn check_script(out: &Path, hover: (usize, usize), rename: (usize, usize)) -> String {
    format!(
        r#"
local out = {{}}
out.attached = vim.wait(30000, function()
  return next(vim.lsp.buf_get_clients(0)) ~= nil and #vim.diagnostic.get(0) > 0
end, 50)
out.filetype = vim.bo.filetype
out.expandtab = vim.bo.expandtab
out.shiftwidth = vim.bo.shiftwidth
out.maps = {{}}
for _, m in ipairs(vim.api.nvim_buf_get_keymap(0, "n")) do table.insert(out.maps, m.lhs) end
for _, m in ipairs(vim.api.nvim_buf_get_keymap(0, "i")) do table.insert(out.maps, "i:" .. m.lhs) end
local d = vim.diagnostic.get(0)[1]
out.shown = d and vim.diagnostic.config().virtual_text.format(d) or ""
local function at(line, character)
  return {{ textDocument = vim.lsp.util.make_text_document_params(), position = {{ line = line, character = character }} }}
end
local hover = vim.lsp.buf_request_sync(0, "textDocument/hover", at({hl}, {hc}), 10000) or {{}}
for _, r in pairs(hover) do if r.result then out.hover = r.result.contents.value end end
local params = at({rl}, {rc})
params.newName = "TokenEncoder"
local renamed = vim.lsp.buf_request_sync(0, "textDocument/rename", params, 10000) or {{}}
out.renamed = {{}}
for _, r in pairs(renamed) do
  for uri, edits in pairs((r.result or {{}}).changes or {{}}) do
    out.renamed[vim.fn.fnamemodify(vim.uri_to_fname(uri), ":t")] = #edits
  end
end
vim.fn.writefile({{ vim.fn.json_encode(out) }}, "{out}")
vim.cmd("qa!")
"#,
        hl = hover.0,
        hc = hover.1,
        rl = rename.0,
        rc = rename.1,
        out = out.display()
    )
}

#[test]
fn the_neovim_07_setup_works_as_written() {
    if Command::new("nvim").arg("--version").output().is_err() {
        skipped("no nvim: the Neovim setup of docs/editors.md is not run");
        return;
    }
    let init = block_after("### Neovim 0.7 (Debian 12's 0.7.2) to 0.10", "lua");
    let (dir, model) = project();
    let root = dir.path().join("proj");
    let (init_path, check_path, out) =
        (dir.path().join("init.lua"), dir.path().join("check.lua"), dir.path().join("out.json"));
    std::fs::write(&init_path, init).expect("written");
    let script = check_script(&out, position(&model, "param branch", 7), position(&model, "WordEncoder(vocab", 1));
    std::fs::write(&check_path, script).expect("written");
    let status = Command::new("nvim")
        .args(["--headless", "-u"])
        .arg(&init_path)
        .arg("-c")
        .arg(format!("luafile {}", check_path.display()))
        .arg(root.join("tree.amp"))
        .env("PATH", path_with_ampc())
        .env("XDG_STATE_HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path())
        .current_dir(&root)
        .status()
        .expect("nvim runs");
    assert!(status.success(), "nvim: {status}");
    let out: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("check.lua wrote its findings")).expect("JSON");
    assert_eq!(out["attached"], true, "{out}");
    assert_eq!(out["filetype"], "amp", "{out}");
    assert_eq!((&out["expandtab"], &out["shiftwidth"]), (&serde_json::json!(true), &serde_json::json!(4)), "{out}");
    let maps: Vec<&str> = out["maps"].as_array().expect("maps").iter().filter_map(|m| m.as_str()).collect();
    for key in ["gd", "K", "gr", "\\r", "\\a", "\\s", "\\S", "\\f", "[d", "]d", "\\e", "i:<C-K>", "i:."] {
        assert!(maps.contains(&key), "{key} is not mapped: {maps:?}");
    }
    assert!(out["shown"].as_str().unwrap_or_default().starts_with("E0100: unknown name `foo`"), "{out}");
    let hover = out["hover"].as_str().unwrap_or_default();
    assert!(hover.contains("Linear"), "{out}");
    assert_eq!(out["renamed"], serde_json::json!({ "encoders.amp": 1, "tree.amp": 2 }), "{out}");
}

/// Opens the model, waits for eglot and Flymake's diagnostics, then prints what the setup
/// shows and what the server answers to a hover and a rename, one `key=value` a line.
const EMACS_CHECK: &str = r#"
(find-file "proj/tree.amp")
;; eglot-ensure starts the server after the command that opened the file.
(run-hooks 'post-command-hook)
(let ((deadline (+ (float-time) 30)))
  (while (and (< (float-time) deadline) (not (eglot-current-server)))
    (accept-process-output nil 0.1))
  (flymake-start)
  (while (and (< (float-time) deadline) (null (flymake-diagnostics)))
    (accept-process-output nil 0.1)
    (flymake-start)))
(princ (format "mode=%s\ntabs=%s\nroot=%s\n" major-mode indent-tabs-mode (project-root (project-current))))
(princ (format "diagnostic=%s\n" (mapconcat #'flymake-diagnostic-text (flymake-diagnostics) "|")))
(princ (format "keys=%s %s %s %s\n" (key-binding (kbd "C-c r")) (key-binding (kbd "C-c a"))
               (key-binding (kbd "C-c f")) (key-binding (kbd "M-?"))))
(goto-char (point-min)) (search-forward "param branch") (backward-char 3)
(let ((h (jsonrpc-request (eglot-current-server) :textDocument/hover (eglot--TextDocumentPositionParams))))
  (princ (format "hover=%s\n" (plist-get (plist-get h :contents) :value))))
(goto-char (point-min)) (search-forward "WordEncoder(vocab") (backward-char 10)
(let* ((params (append (eglot--TextDocumentPositionParams) '(:newName "TokenEncoder")))
       (changes (plist-get (jsonrpc-request (eglot-current-server) :textDocument/rename params) :changes)))
  (while changes
    (princ (format "renamed=%s %d\n" (file-name-nondirectory (symbol-name (car changes))) (length (cadr changes))))
    (setq changes (cddr changes))))
(kill-emacs 0)
"#;

#[test]
fn the_emacs_eglot_setup_works_as_written() {
    let has_eglot = Command::new("emacs").args(["--batch", "--eval", "(require 'eglot)"]).output();
    if !has_eglot.is_ok_and(|o| o.status.success()) {
        skipped("no emacs with eglot: the Emacs setup of docs/editors.md is not run");
        return;
    }
    let init = block_after("## Emacs", "elisp");
    let (dir, _) = project();
    let (init_path, check_path) = (dir.path().join("init.el"), dir.path().join("check.el"));
    std::fs::write(&init_path, init).expect("written");
    std::fs::write(&check_path, EMACS_CHECK).expect("written");
    let output = Command::new("emacs")
        .args(["--batch", "-l"])
        .arg(&init_path)
        .arg("-l")
        .arg(&check_path)
        .env("PATH", path_with_ampc())
        .env("HOME", dir.path())
        .current_dir(dir.path())
        .output()
        .expect("emacs runs");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}\n{}", String::from_utf8_lossy(&output.stderr));
    let root = dir.path().join("proj").canonicalize().expect("the project");
    for line in [
        "mode=amp-mode".to_string(),
        "tabs=nil".to_string(),
        format!("root={}/", root.display()),
        "keys=eglot-rename eglot-code-actions eglot-format-buffer xref-find-references".to_string(),
        "hover=```amp\nparam branch: Linear(2 * hidden, 5 * hidden)\n```".to_string(),
        "renamed=encoders.amp 1".to_string(),
        "renamed=tree.amp 2".to_string(),
        "diagnostic=ampc [E0100]: unknown name `foo`".to_string(),
    ] {
        assert!(out.contains(&line), "`{line}` not in:\n{out}");
    }
}
