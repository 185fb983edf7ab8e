//! `ampc lsp` as an editor runs it: the real binary, JSON-RPC with Content-Length framing
//! over its stdin and stdout. Every read is bounded (a reader thread and a channel with a
//! timeout), so a broken server fails the test instead of hanging it.

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A running `ampc lsp` and the messages it sent that no one has asked for yet.
struct Session {
    child: Child,
    stdin: ChildStdin,
    incoming: Receiver<Value>,
    unclaimed: VecDeque<Value>,
    next_id: i64,
}

/// Reads one framed message; `None` at end of stream or on a malformed frame.
fn read_message(reader: &mut impl BufRead) -> Option<Value> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("Content-Length:") {
            length = value.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length?];
    reader.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

impl Session {
    fn start() -> Session {
        Session::start_with(json!({ "processId": null, "rootUri": null, "capabilities": {} }))
    }

    /// Starts a server and initializes it with `params`.
    fn start_with(params: Value) -> Session {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ampc"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ampc lsp starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, incoming) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            while let Some(message) = read_message(&mut reader) {
                if sender.send(message).is_err() {
                    break;
                }
            }
        });
        let mut session = Session { child, stdin, incoming, unclaimed: VecDeque::new(), next_id: 1 };
        let init = session.request("initialize", params);
        let capabilities = &init["result"]["capabilities"];
        assert_eq!(capabilities["hoverProvider"], json!(true), "{init}");
        assert_eq!(capabilities["definitionProvider"], json!(true));
        assert_eq!(capabilities["documentSymbolProvider"], json!(true));
        assert_eq!(capabilities["documentFormattingProvider"], json!(true));
        assert_eq!(capabilities["signatureHelpProvider"]["triggerCharacters"], json!(["(", ","]));
        session.notify("initialized", json!({}));
        session
    }

    fn send(&mut self, message: Value) {
        let body = message.to_string();
        let framed = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        self.send_raw(framed.as_bytes());
    }

    /// Writes bytes as they are, framed or not.
    fn send_raw(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).expect("server reads stdin");
        self.stdin.flush().expect("flush");
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request and waits for its response (the whole message, with `result` or
    /// `error`), keeping the notifications that arrive meanwhile.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        self.wait_for(|m| m["id"] == json!(id) && m.get("method").is_none())
    }

    /// The next `publishDiagnostics` for `uri`.
    fn diagnostics_for(&mut self, uri: &str) -> Vec<Value> {
        let message = self.wait_for(|m| m["method"] == "textDocument/publishDiagnostics" && m["params"]["uri"] == uri);
        message["params"]["diagnostics"].as_array().cloned().expect("a list of diagnostics")
    }

    fn wait_for(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.unclaimed.iter().position(&wanted) {
            return self.unclaimed.remove(i).expect("index just found");
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.incoming.recv_timeout(left) {
                Ok(message) if wanted(&message) => return message,
                Ok(message) => self.unclaimed.push_back(message),
                Err(e) => panic!("no awaited message from ampc lsp within {TIMEOUT:?}: {e}; got {:?}", self.unclaimed),
            }
        }
    }

    fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({ "textDocument": { "uri": uri, "languageId": "amp", "version": 1, "text": text } }),
        );
    }

    /// Sends `shutdown` and `exit` and returns the exit status.
    fn shut_down(mut self) -> Option<i32> {
        let response = self.request("shutdown", Value::Null);
        assert_eq!(response["result"], Value::Null, "{response}");
        assert!(response.get("error").is_none());
        self.notify("exit", Value::Null);
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match self.child.try_wait().expect("status readable") {
                Some(status) => return status.code(),
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                None => {
                    let _ = self.child.kill();
                    panic!("ampc lsp did not exit within {TIMEOUT:?} of `exit`");
                }
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A failed test must not leave a server behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    std::fs::read_to_string(path).expect("the example exists")
}

/// The LSP position (line, UTF-16 column) of byte `offset` of `text`.
fn position(text: &str, offset: usize) -> Value {
    let before = &text[..offset];
    let line = before.matches('\n').count();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let character = before[line_start..].encode_utf16().count();
    json!({ "line": line, "character": character })
}

/// The position `delta` bytes into the first occurrence of `needle`.
fn position_of(text: &str, needle: &str, delta: usize) -> Value {
    let offset = text.find(needle).unwrap_or_else(|| panic!("`{needle}` in the text"));
    position(text, offset + delta)
}

fn at(uri: &str, position: Value) -> Value {
    json!({ "textDocument": { "uri": uri }, "position": position })
}

/// The range of the whole of `text`: from its start to the start of its last line (the
/// server refuses positions past the text).
fn whole(text: &str) -> Value {
    let last = text.matches('\n').count();
    json!({ "start": { "line": 0, "character": 0 }, "end": { "line": last, "character": 0 } })
}

const BROKEN: &str = "model M(n: int = 4) {
    param l = Linear(n, 3);
    fn forward(x: f32[5]) -> f32[3] { l(x) }
    fn loss(x: f32[5]) -> f32 { /* é𝄞 */ sum(forward(x)) + foo }
}
";

const FIXED: &str = "model M(n: int = 4) {
    param l = Linear(n, 3);
    fn forward(x: f32[4]) -> f32[3] { l(x) }
    fn loss(x: f32[4]) -> f32 { /* é𝄞 */ sum(forward(x)) }
}
";

#[test]
fn diagnostics_are_published_on_open_and_cleared_once_fixed() {
    let mut session = Session::start();
    let uri = "file:///tmp/amp-lsp-test/broken.amp";
    session.open(uri, BROKEN);
    let diagnostics = session.diagnostics_for(uri);
    let codes: Vec<&str> = diagnostics.iter().filter_map(|d| d["code"].as_str()).collect();
    assert_eq!(codes, ["E0301", "E0100"], "{diagnostics:#?}");

    // E0301 on the argument of `l(x)`, with the `param` declaration as related information.
    let shape = &diagnostics[0];
    let x = BROKEN.find("l(x)").expect("the call") + 2;
    assert_eq!(shape["range"], json!({ "start": position(BROKEN, x), "end": position(BROKEN, x + 1) }));
    assert_eq!(shape["severity"], json!(1));
    assert_eq!(shape.get("codeDescription"), None, "no workspace and no docsBaseUrl: no link");
    let related = &shape["relatedInformation"][0];
    assert_eq!(related["location"]["uri"], uri);
    assert_eq!(related["location"]["range"]["start"], position_of(BROKEN, "l = Linear", 0));

    // E0100 after `/* é𝄞 */`: the column counts UTF-16 units (𝄞 is two), not bytes.
    let unknown = &diagnostics[1];
    let foo = BROKEN.find("foo").expect("foo");
    assert_eq!(unknown["range"]["start"], position(BROKEN, foo));
    let line = BROKEN.lines().nth(3).expect("line 3");
    let bytes_before = line.find("foo").expect("foo on line 3");
    assert_eq!(unknown["range"]["start"]["character"], json!(bytes_before - 3));

    // An incremental edit (`f32[5]` -> `f32[4]` in `forward`) fixes the shape error only.
    let five = position_of(BROKEN, "5]) -> f32[3]", 0);
    let after_five = position_of(BROKEN, "5]) -> f32[3]", 1);
    session.notify(
        "textDocument/didChange",
        json!({
            "textDocument": { "uri": uri, "version": 2 },
            "contentChanges": [{ "range": { "start": five, "end": after_five }, "text": "4" }],
        }),
    );
    let remaining = session.diagnostics_for(uri);
    let codes: Vec<&str> = remaining.iter().filter_map(|d| d["code"].as_str()).collect();
    assert!(!codes.contains(&"E0301") && codes.contains(&"E0100"), "{remaining:#?}");
    // A full replacement with the fixed text clears them all.
    session.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 3 }, "contentChanges": [{ "text": FIXED }] }),
    );
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());

    // Saving republishes (still nothing).
    session.notify("textDocument/didSave", json!({ "textDocument": { "uri": uri } }));
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn hover_definition_and_symbols_on_the_examples() {
    let mut session = Session::start();
    let list_reduce = example("list_reduce.amp");
    let uri = "file:///tmp/amp-lsp-test/list_reduce.amp";
    session.open(uri, &list_reduce);
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());

    // Hover on `h` in `head(h)` shows its symbolic shape.
    let on_h = position_of(&list_reduce, "head(h)", 5);
    let hover = session.request("textDocument/hover", at(uri, on_h.clone()));
    let text = hover["result"]["contents"]["value"].as_str().unwrap_or_default();
    assert!(text.contains("f32[hidden]"), "{hover}");

    // Definition of that local: its `var h` binding.
    let definition = session.request("textDocument/definition", at(uri, on_h));
    assert_eq!(definition["result"]["uri"], uri);
    assert_eq!(definition["result"]["range"]["start"], position_of(&list_reduce, "var h", 4));

    // The model and its functions, nested.
    let symbols = session.request("textDocument/documentSymbol", json!({ "textDocument": { "uri": uri } }));
    let roots = symbols["result"].as_array().cloned().unwrap_or_default();
    let model = roots.iter().find(|s| s["name"] == "ListReduce").expect("the model is listed");
    let children: Vec<&str> =
        model["children"].as_array().map(|c| c.iter().filter_map(|s| s["name"].as_str()).collect()).unwrap_or_default();
    assert!(children.contains(&"forward") && children.contains(&"loss"), "{children:?}");
    assert!(children.contains(&"embed"), "params are children too: {children:?}");

    // A standard-library layer resolves to the materialised `nn.amp`.
    let ggsnn = example("ggsnn.amp");
    let ggsnn_uri = "file:///tmp/amp-lsp-test/ggsnn.amp";
    session.open(ggsnn_uri, &ggsnn);
    assert_eq!(session.diagnostics_for(ggsnn_uri), Vec::<Value>::new());
    let on_layer = position_of(&ggsnn, "GruCell(hidden", 3);
    let definition = session.request("textDocument/definition", at(ggsnn_uri, on_layer));
    let target = definition["result"]["uri"].as_str().unwrap_or_default();
    assert!(target.starts_with("file://") && target.ends_with("/nn.amp"), "{definition}");
    let line = definition["result"]["range"]["start"]["line"].as_u64().unwrap_or(u64::MAX);
    let path = target.trim_start_matches("file://");
    let stdlib = std::fs::read_to_string(path).expect("the materialised standard library");
    let declared = stdlib.lines().nth(usize::try_from(line).unwrap_or(usize::MAX));
    assert!(declared.is_some_and(|l| l.contains("layer GruCell")), "{declared:?}");

    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn malformed_requests_get_error_responses_and_the_server_keeps_going() {
    let mut session = Session::start();
    let bad = session.request("textDocument/hover", json!({ "position": "nowhere" }));
    assert_eq!(bad["error"]["code"], json!(-32602), "{bad}");
    let unknown = session.request("amp/unknown", json!({}));
    assert_eq!(unknown["error"]["code"], json!(-32601), "{unknown}");
    // Half-typed code: the parser never fails, the server answers.
    let uri = "file:///tmp/amp-lsp-test/half.amp";
    session.open(uri, "model M(n: int = 2) {\n    fn forward(x: f32[n]) -> f32[n] { let y = x.");
    assert!(!session.diagnostics_for(uri).is_empty());
    let completion = session.request("textDocument/completion", at(uri, json!({ "line": 1, "character": 44 })));
    assert!(completion.get("error").is_none(), "{completion}");
    // A position past the text is refused, saying where (issue 47: answered at a clamped
    // position, it was about another token).
    let hover = session.request("textDocument/hover", at(uri, json!({ "line": 99, "character": 99 })));
    assert_eq!(hover["error"]["code"], json!(-32602), "{hover}");
    assert!(hover["error"]["message"].as_str().is_some_and(|m| m.contains("position 99:99 is outside")), "{hover}");
    let completion = session.request("textDocument/completion", at(uri, json!({ "line": 1, "character": 44 })));
    assert!(completion.get("error").is_none(), "the server goes on: {completion}");
    assert_eq!(session.shut_down(), Some(0));
}

/// Frames `body` (any bytes) with a correct `Content-Length`.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut bytes = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// A request the server answers with `null` (hover on a document never opened).
fn still_answers(session: &mut Session, after: &str) {
    let response = session
        .request("textDocument/hover", at("file:///tmp/amp-lsp-test/none.amp", json!({ "line": 0, "character": 0 })));
    assert_eq!(response["result"], Value::Null, "after {after}: {response}");
    assert!(response.get("error").is_none(), "after {after}: {response}");
}

/// Peak resident memory of a process in KiB (Linux).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn invalid_json_is_dropped_and_the_server_goes_on() {
    let mut session = Session::start();
    session.send_raw(b"Content-Length: 5\r\n\r\n{abc}");
    still_answers(&mut session, "invalid JSON");
    session.send_raw(&framed(b"{\"jsonrpc\":\"2.0\",\"id\":"));
    still_answers(&mut session, "truncated JSON");
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn bad_headers_are_skipped_and_the_server_goes_on() {
    let mut session = Session::start();
    session.send_raw(b"Content-Length 5\r\n\r\n{abc}");
    still_answers(&mut session, "a header without a colon");
    session.send_raw(b"Content-Length: five\r\n\r\n{}");
    still_answers(&mut session, "a length that is not a number");
    session.send_raw(b"\r\n\r\njunk");
    still_answers(&mut session, "empty lines and junk");
    session.send_raw(format!("X-Long: {}\r\n", "x".repeat(100_000)).as_bytes());
    still_answers(&mut session, "a 100 KB header line");
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn non_objects_are_dropped_and_the_server_goes_on() {
    let mut session = Session::start();
    for body in
        [&b"[1, 2]"[..], b"42", b"\"text\"", b"null", b"[{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"shutdown\"}]"]
    {
        session.send_raw(&framed(body));
        still_answers(&mut session, &String::from_utf8_lossy(body));
    }
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn a_message_without_a_method_gets_invalid_request() {
    let mut session = Session::start();
    session.send(json!({ "jsonrpc": "2.0", "id": 500, "params": {} }));
    let answer = session.wait_for(|m| m["id"] == json!(500));
    assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");
    session.send(json!({ "jsonrpc": "2.0", "params": {} }));
    still_answers(&mut session, "a notification without a method");
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn invalid_utf8_gets_a_parse_error_and_the_server_goes_on() {
    let mut session = Session::start();
    let mut body = br#"{"jsonrpc":"2.0","id":501,"method":"textDocument/hover","params":{"x":""#.to_vec();
    body.extend_from_slice(b"\xc3\x28\xff\"}}");
    session.send_raw(&framed(&body));
    let answer = session.wait_for(|m| m["id"] == json!(501));
    assert_eq!(answer["error"]["code"], json!(-32700), "{answer}");
    session.send_raw(&framed(b"\xff\xfe\xfd"));
    still_answers(&mut session, "bytes that are not UTF-8");
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn a_huge_content_length_is_refused_without_allocating_it() {
    let mut session = Session::start();
    let pid = session.child.id();
    for huge in ["1000000000000", "3000000000", "99999999999999999999999"] {
        session.send_raw(
            format!("Content-Length: {huge}\r\n\r\n{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"shutdown\"}}")
                .as_bytes(),
        );
        still_answers(&mut session, &format!("Content-Length: {huge}"));
    }
    // 3e9 used to allocate 2.9 GB; the server's peak stays that of a small process.
    if let Some(peak) = peak_rss_kib(pid) {
        assert!(peak < 512 * 1024, "peak resident memory {peak} KiB");
    }
    assert_eq!(session.shut_down(), Some(0));
}

/// The hover text at the first occurrence of `needle`, `delta` bytes in.
fn hover_text(session: &mut Session, uri: &str, text: &str, needle: &str, delta: usize) -> String {
    let hover = session.request("textDocument/hover", at(uri, position_of(text, needle, delta)));
    hover["result"]["contents"]["value"].as_str().unwrap_or_default().to_string()
}

#[test]
fn hover_on_declarations_shows_signatures_and_doc_comments() {
    let mut session = Session::start();
    let text = "/// One list of tokens and its label.\nrecord Example { tokens: [int], label: int }\n\n\
                /// Reduces a list.\nmodel Reduce(vocab: int = 14, hidden: int = 128) {\n    \
                /// The recurrent cell.\n    param cell = Linear(2 * hidden, hidden);\n    \
                param embed = Embedding(vocab, hidden);\n    param head = Linear(hidden, 2);\n\n    \
                /// Runs the cell over the tokens.\n    fn forward(x: Example) -> f32[2] {\n        \
                var h: f32[hidden] = zeros();\n        for tok in x.tokens { h = relu(cell(concat(embed(tok), h))); }\n        \
                head(h)\n    }\n    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }\n}\n";
    let uri = "file:///tmp/amp-lsp-test/declarations.amp";
    session.open(uri, text);
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());
    let cases: [(&str, usize, &str, Option<&str>); 7] = [
        ("record Example", 8, "record Example { tokens: [int], label: int }", Some("One list of tokens")),
        ("tokens: [int]", 1, "Example.tokens: [int]", None),
        ("model Reduce", 7, "model Reduce(vocab: int = 14, hidden: int = 128)", Some("Reduces a list.")),
        ("hidden: int = 128", 2, "hidden: int = 128", None),
        ("cell =", 0, "param cell: Linear(2 * hidden, hidden)", Some("The recurrent cell.")),
        ("fn forward", 3, "fn forward(x: Example) -> f32[2]", Some("Runs the cell")),
        ("Linear(2 * hidden", 0, "weight f32[hidden, 2 * hidden] (= f32[128, 256])", Some("fully connected")),
    ];
    for (needle, delta, signature, doc) in cases {
        let shown = hover_text(&mut session, uri, text, needle, delta);
        assert!(shown.contains(signature), "hover on `{needle}`: {shown}");
        if let Some(doc) = doc {
            assert!(shown.contains(doc), "hover on `{needle}`: {shown}");
        }
    }
    // A standard-library layer's constructor shows its declaration and doc comment.
    let ggsnn = example("ggsnn.amp");
    let ggsnn_uri = "file:///tmp/amp-lsp-test/ggsnn-hover.amp";
    session.open(ggsnn_uri, &ggsnn);
    assert_eq!(session.diagnostics_for(ggsnn_uri), Vec::<Value>::new());
    let shown = hover_text(&mut session, ggsnn_uri, &ggsnn, "GruCell(hidden", 3);
    assert!(shown.contains("layer GruCell(input: int, hidden: int)"), "{shown}");
    assert!(shown.contains("gated recurrent unit"), "{shown}");
    assert_eq!(session.shut_down(), Some(0));
}

fn formatting(session: &mut Session, uri: &str) -> Value {
    let options = json!({ "tabSize": 2, "insertSpaces": false });
    session.request("textDocument/formatting", json!({ "textDocument": { "uri": uri }, "options": options }))
}

#[test]
fn formatting_returns_the_canonical_layout_as_edits() {
    let mut session = Session::start();
    let uri = "file:///tmp/amp-lsp-test/fmt.amp";
    // Non-ASCII in a comment on the last line: the edit's end is in UTF-16 columns.
    let messy = "model M(h:int=4){\n  param l=Linear(h,h);\n  fn forward(x:f32[h])->f32[h]{l(x)}\n  fn loss(x:f32[h])->f32{sum(forward(x))}\n} // é𝄞";
    let formatted = "model M(h: int = 4) {\n    param l = Linear(h, h);\n    fn forward(x: f32[h]) -> f32[h] { l(x) }\n    fn loss(x: f32[h]) -> f32 { sum(forward(x)) }\n} // é𝄞\n";
    session.open(uri, messy);
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());
    let response = formatting(&mut session, uri);
    let edits = response["result"].as_array().cloned().unwrap_or_default();
    assert_eq!(edits.len(), 1, "{response}");
    assert_eq!(edits[0]["range"]["start"], json!({ "line": 0, "character": 0 }));
    assert_eq!(
        edits[0]["range"]["end"],
        json!({ "line": 4, "character": 8 }),
        "the closing brace, the comment and a surrogate pair"
    );
    assert_eq!(edits[0]["newText"], formatted, "the editor's tab settings are not the layout's");

    // Once applied, nothing is left to do.
    session.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": [{ "text": formatted }] }),
    );
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());
    assert_eq!(formatting(&mut session, uri)["result"], json!([]));

    // A document with a syntax error gets no edit; an unknown one neither.
    let broken = "file:///tmp/amp-lsp-test/broken.amp";
    session.open(broken, "model M {\n  fn forward(x: f32) -> f32 { x +  }\n}\n");
    assert!(!session.diagnostics_for(broken).is_empty());
    let response = formatting(&mut session, broken);
    assert_eq!(response["result"], Value::Null, "{response}");
    assert!(response.get("error").is_none());
    assert_eq!(formatting(&mut session, "file:///never-opened.amp")["result"], Value::Null);

    assert_eq!(session.shut_down(), Some(0));
}

/// A document whose only change from the layout is one line gets one edit of that line,
/// so the rest keeps its cursor and history (issue 47: the whole document was replaced);
/// range formatting returns only the edits that touch the range.
#[test]
fn formatting_changes_only_the_lines_the_layout_changes() {
    let mut session = Session::start();
    let uri = "file:///tmp/amp-lsp-test/minimal.amp";
    let canonical = example("list_reduce.amp");
    let messy = canonical
        .replacen("    param head = Linear(hidden, classes);", "    param head=Linear(hidden,classes);", 1)
        .replacen("    fn loss(x: Example) -> f32 {", "    fn loss(x:Example)->f32 {", 1);
    assert_ne!(messy, canonical);
    session.open(uri, &messy);
    let line_of = |needle: &str| messy[..messy.find(needle).unwrap()].matches('\n').count();
    let (head, loss) = (line_of("param head="), line_of("fn loss(x:"));
    let edits = formatting(&mut session, uri)["result"].as_array().cloned().unwrap_or_default();
    let spans: Vec<(Value, Value)> =
        edits.iter().map(|e| (e["range"]["start"].clone(), e["range"]["end"].clone())).collect();
    let line = |l: usize| (json!({ "line": l, "character": 0 }), json!({ "line": l + 1, "character": 0 }));
    assert_eq!(spans, [line(head), line(loss)], "{edits:?}");
    assert_eq!(edits[0]["newText"], "    param head = Linear(hidden, classes);\n");
    // Only the range's: the `head` line, not the `loss` one.
    let range = json!({ "start": { "line": head, "character": 0 }, "end": { "line": head, "character": 5 } });
    let params =
        json!({ "textDocument": { "uri": uri }, "range": range, "options": { "tabSize": 4, "insertSpaces": true } });
    let ranged =
        session.request("textDocument/rangeFormatting", params)["result"].as_array().cloned().unwrap_or_default();
    assert_eq!(ranged, edits[..1].to_vec());
    assert_eq!(session.shut_down(), Some(0));
}

/// The `href` of the first diagnostic of a broken document in a server initialized with
/// `params`.
fn first_code_link(params: Value) -> Value {
    let mut session = Session::start_with(params);
    let uri = "file:///tmp/amp-lsp-test/link.amp";
    session.open(uri, BROKEN);
    let diagnostics = session.diagnostics_for(uri);
    let href = diagnostics[0]["codeDescription"]["href"].clone();
    assert_eq!(session.shut_down(), Some(0));
    href
}

#[test]
fn error_codes_link_to_the_configured_pages_or_the_workspace_docs() {
    let configured =
        json!({ "capabilities": {}, "initializationOptions": { "docsBaseUrl": "https://amp.example/errors/" } });
    assert_eq!(first_code_link(configured), "https://amp.example/errors/E0301.md");

    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository");
    let root = format!("file://{}", repo.display());
    let href = first_code_link(json!({ "capabilities": {}, "rootUri": root }));
    assert_eq!(href, format!("{root}/docs/errors/E0301.md"));
    let page = repo.join("docs/errors/E0301.md");
    assert!(page.is_file(), "the link points at a page that exists");
}

/// `list_reduce.amp` with `line` added after its `for` loop.
fn list_reduce_with(line: &str) -> String {
    example("list_reduce.amp").replacen("        head(h)", &format!("        {line}\n        head(h)"), 1)
}

fn completion_labels(session: &mut Session, uri: &str, position: Value) -> Vec<String> {
    let response = session.request("textDocument/completion", at(uri, position));
    let items = response["result"].as_array().cloned().unwrap_or_default();
    items.iter().filter_map(|i| i["label"].as_str().map(str::to_string)).collect()
}

#[test]
fn a_half_typed_line_is_one_error_at_its_place_and_the_body_still_checks() {
    let mut session = Session::start();
    for (n, line) in ["let y = x.", "let y = relu(", "let y = embed(3)"].iter().enumerate() {
        let uri = format!("file:///half{n}.amp");
        // A type error above the half-typed line must still be reported.
        let text = list_reduce_with(line).replacen("zeros();", "zeros();\n        let k: int = 0.5;", 1);
        session.open(&uri, &text);
        let diagnostics = session.diagnostics_for(&uri);
        let codes: Vec<(&str, u64)> = diagnostics
            .iter()
            .map(|d| (d["code"].as_str().unwrap_or(""), d["range"]["start"]["line"].as_u64().unwrap_or(0)))
            .collect();
        let half_line = text.lines().position(|l| l.trim() == *line).expect("the line") as u64;
        let k_line = text.lines().position(|l| l.contains("let k")).expect("the k line") as u64;
        assert_eq!(codes, [("E0200", k_line), ("E0010", half_line)], "{line}: {diagnostics:?}");
    }
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn completion_after_a_dot_on_a_line_that_does_not_parse_uses_the_receiver_type() {
    let mut session = Session::start();
    let cases = [
        ("let y = x.", vec!["tokens", "label"]),
        ("for tok in x.", vec!["tokens", "label"]),
        ("let t = x.tokens;\n        let u = t.", vec!["map"]),
        ("let u = x.tokens.", vec!["map"]),
    ];
    for (n, (line, expected)) in cases.iter().enumerate() {
        let uri = format!("file:///dot{n}.amp");
        let text = list_reduce_with(line);
        session.open(&uri, &text);
        let _ = session.diagnostics_for(&uri);
        let dot = text.find(line).expect("the line") + line.len();
        let labels = completion_labels(&mut session, &uri, position(&text, dot));
        assert_eq!(labels, *expected, "after `{line}`");
    }
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn completion_offers_only_the_names_in_scope_at_the_cursor() {
    let mut session = Session::start();
    let uri = "file:///ggsnn.amp";
    let text = example("ggsnn.amp");
    session.open(uri, &text);
    let _ = session.diagnostics_for(uri);
    // The line after `scatter_sum`: the closure parameters of earlier closures are gone.
    let scatter = text.find("scatter_sum").expect("a scatter_sum call");
    let next_line = scatter + text[scatter..].find('\n').expect("a line end") + 1;
    let indent = text[next_line..].len() - text[next_line..].trim_start().len();
    let labels = completion_labels(&mut session, uri, position(&text, next_line + indent));
    assert!(labels.iter().any(|l| l == "h"), "{labels:?}");
    for out_of_scope in ["k", "e"] {
        assert!(!labels.iter().any(|l| l == out_of_scope), "`{out_of_scope}` offered: {labels:?}");
    }
    assert_eq!(session.shut_down(), Some(0));
}

/// The inlay hints of `range` as (line, column, label).
fn inlay_hints(session: &mut Session, uri: &str, range: Value) -> Vec<(u64, u64, String)> {
    let response = session.request("textDocument/inlayHint", json!({ "textDocument": { "uri": uri }, "range": range }));
    let hints = response["result"].as_array().cloned().unwrap_or_default();
    hints
        .iter()
        .map(|h| {
            let at = &h["position"];
            let line = at["line"].as_u64().unwrap_or(u64::MAX);
            (line, at["character"].as_u64().unwrap_or(u64::MAX), h["label"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

#[test]
fn inlay_hints_show_the_inferred_shapes_within_the_range() {
    let mut session = Session::start();
    let uri = "file:///tmp/amp-lsp-test/ggsnn-hints.amp";
    let text = example("ggsnn.amp");
    session.open(uri, &text);
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());
    let hints = inlay_hints(&mut session, uri, whole(&text));
    let seq = ": [f32[hidden] (= f32[32])]";
    let vector = ": f32[hidden] (= f32[32])";
    let line = |needle: &str| text.lines().position(|l| l.contains(needle)).expect("the line") as u64;
    let (h, m, a, zip) = (line("var h ="), line("let m ="), line("let a ="), line("zip(a, h)"));
    let expected = [
        // `var h` and the closure parameter `k`.
        (h, 13, seq),
        (h, 30, ": int"),
        (m, 17, seq),
        (m, 34, ": Edge"),
        (a, 17, seq),
        (a, 49, ": Edge"),
        // The destructured closure parameters `(ai, hi)`.
        (zip, 34, vector),
        (zip, 38, vector),
    ];
    let expected: Vec<(u64, u64, String)> = expected.iter().map(|(l, c, s)| (*l, *c, s.to_string())).collect();
    assert_eq!(hints, expected);
    // Only the hints inside the range; none for the written types of parameters.
    let one_line = json!({ "start": { "line": zip, "character": 0 }, "end": { "line": zip, "character": 36 } });
    assert_eq!(inlay_hints(&mut session, uri, one_line), [(zip, 34, vector.to_string())]);
    let declarations = json!({ "start": { "line": 0, "character": 0 }, "end": { "line": h - 1, "character": 0 } });
    assert_eq!(inlay_hints(&mut session, uri, declarations), Vec::new());
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn quick_fixes_replace_a_misspelled_name_and_rename_an_unused_variable() {
    let mut session = Session::start();
    let uri = "file:///tmp/amp-lsp-test/fixes.amp";
    let text = list_reduce_with("let spare = 3;").replacen("head(h)", "head(hh)", 1);
    session.open(uri, &text);
    let diagnostics = session.diagnostics_for(uri);
    let codes: Vec<&str> = diagnostics.iter().filter_map(|d| d["code"].as_str()).collect();
    assert_eq!(codes, ["W0001", "E0100"], "{diagnostics:?}");
    let everything = whole(&text);
    let context = json!({ "diagnostics": diagnostics, "only": ["quickfix"] });
    let response = session.request(
        "textDocument/codeAction",
        json!({ "textDocument": { "uri": uri }, "range": everything, "context": context }),
    );
    let actions = response["result"].as_array().cloned().unwrap_or_default();
    let titles: Vec<&str> = actions.iter().filter_map(|a| a["title"].as_str()).collect();
    assert_eq!(titles, ["Rename `spare` to `_spare`", "Replace `hh` with `h`"], "{response}");
    for action in &actions {
        assert_eq!(action["kind"], "quickfix");
        assert_eq!(action["diagnostics"].as_array().map(Vec::len), Some(1), "{action}");
    }
    let edits: Vec<Value> =
        actions.iter().filter_map(|a| a["edit"]["changes"][uri].as_array().cloned()).flatten().collect();
    assert_eq!(edits[0]["range"]["start"], position_of(&text, "spare", 0));
    assert_eq!(edits[1]["range"]["start"], position_of(&text, "hh)", 0));
    // Applying both (the later one first) leaves a file without diagnostics.
    let changes: Vec<Value> =
        edits.iter().rev().map(|e| json!({ "range": e["range"], "text": e["newText"] })).collect();
    session.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": changes }),
    );
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());
    // A cursor away from both diagnostics, and a client that wants only refactorings, get none.
    let cursor = json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 0, "character": 0 } });
    for (range, only) in [(cursor, json!(["quickfix"])), (everything, json!(["refactor"]))] {
        let context = json!({ "diagnostics": [], "only": only });
        let response = session.request(
            "textDocument/codeAction",
            json!({ "textDocument": { "uri": uri }, "range": range, "context": context }),
        );
        assert_eq!(response["result"], json!([]), "{response}");
    }
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn folding_ranges_cover_items_bodies_and_blocks_and_highlight_finds_every_use() {
    let mut session = Session::start();
    let uri = "file:///tmp/amp-lsp-test/fold.amp";
    let text = example("list_reduce.amp");
    session.open(uri, &text);
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new());
    let response = session.request("textDocument/foldingRange", json!({ "textDocument": { "uri": uri } }));
    let folds: Vec<(u64, u64, Option<&str>)> = response["result"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|f| (f["startLine"].as_u64().unwrap_or(0), f["endLine"].as_u64().unwrap_or(0), f["kind"].as_str()))
                .collect()
        })
        .unwrap_or_default();
    let line = |needle: &str| text.lines().position(|l| l.contains(needle)).expect("the line") as u64;
    let (model, forward, for_loop, last) =
        (line("model ListReduce"), line("fn forward"), line("for tok"), line("fn loss"));
    assert_eq!(
        folds,
        [
            (0, 1, Some("comment")),
            (model, last, None),
            (forward, line("head(h)"), None),
            (for_loop, for_loop + 1, None),
        ],
        "{response}"
    );
    // `h` from a use: its `var` (a write) and its three uses.
    let response = session.request("textDocument/documentHighlight", at(uri, position_of(&text, "head(h)", 5)));
    let highlights: Vec<(u64, u64)> = response["result"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|h| (h["range"]["start"]["line"].as_u64().unwrap_or(0), h["kind"].as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    let (var, body) = (line("var h"), line("h = relu"));
    assert_eq!(highlights, [(var, 3), (body, 2), (body, 2), (line("head(h)"), 2)], "{response}");
    // A parameter from its declaration: the declaration and the uses in the body.
    let response = session.request("textDocument/documentHighlight", at(uri, position_of(&text, "param cell", 7)));
    let lines: Vec<u64> = response["result"]
        .as_array()
        .map(|list| list.iter().filter_map(|h| h["range"]["start"]["line"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(lines, [line("param cell"), body], "{response}");
    assert_eq!(session.shut_down(), Some(0));
}

/// The (uri, line, character) of each location in a `references` answer.
fn reference_starts(
    session: &mut Session,
    uri: &str,
    position: Value,
    include_declaration: bool,
) -> Vec<(String, u64, u64)> {
    let mut params = at(uri, position);
    params["context"] = json!({ "includeDeclaration": include_declaration });
    let response = session.request("textDocument/references", params);
    let locations = response["result"].as_array().cloned().unwrap_or_else(|| panic!("locations: {response}"));
    locations
        .iter()
        .map(|l| {
            let start = &l["range"]["start"];
            let uri = l["uri"].as_str().unwrap_or_default().to_string();
            (uri, start["line"].as_u64().unwrap_or(u64::MAX), start["character"].as_u64().unwrap_or(u64::MAX))
        })
        .collect()
}

#[test]
fn references_find_every_kind_of_name_and_honour_include_declaration() {
    let mut session = Session::start();
    let uri = "file:///examples/list_reduce.amp";
    let text = example("list_reduce.amp");
    session.open(uri, &text);
    session.diagnostics_for(uri);
    let here = |needle: &str, delta: usize| {
        let p = position_of(&text, needle, delta);
        (uri.to_string(), p["line"].as_u64().unwrap_or(0), p["character"].as_u64().unwrap_or(0))
    };
    // (cursor, declaration, uses): a local, a hyperparameter, a `param` layer, a
    // function, a record and a field; from a use or from the declaration.
    let cases = [
        (here("head(h)", 5), here("var h", 4), vec![here("h = relu", 0), here("h)));", 0), here("head(h)", 5)]),
        (
            here("hidden: int", 0),
            here("hidden: int", 0),
            vec![
                here("vocab, hidden", 7),
                here("2 * hidden", 4),
                here("hidden, hidden)", 8),
                here("hidden, classes", 0),
                here("f32[hidden]", 4),
            ],
        ),
        (here("cell(concat", 0), here("cell = Linear", 0), vec![here("cell(concat", 0)]),
        (here("forward(x),", 0), here("forward(x: Example)", 0), vec![here("forward(x),", 0)]),
        (
            here("Example {", 0),
            here("Example {", 0),
            vec![here("Example) -> f32[classes]", 0), here("Example) -> f32 {", 0)],
        ),
        (here("x.label", 2), here("label: int", 0), vec![here("x.label", 2)]),
    ];
    for (cursor, declaration, uses) in cases {
        let position = json!({ "line": cursor.1, "character": cursor.2 });
        let mut expected = uses.clone();
        expected.sort();
        let mut found = reference_starts(&mut session, uri, position.clone(), false);
        found.sort();
        assert_eq!(found, expected, "uses of the name at {cursor:?}");
        expected.push(declaration);
        expected.sort();
        let mut found = reference_starts(&mut session, uri, position, true);
        found.sort();
        assert_eq!(found, expected, "declaration and uses of the name at {cursor:?}");
    }

    // A standard-library layer: the import and the call here, the declaration in the
    // materialised module.
    let ggsnn = "file:///examples/ggsnn.amp";
    let text = example("ggsnn.amp");
    session.open(ggsnn, &text);
    session.diagnostics_for(ggsnn);
    let found = reference_starts(&mut session, ggsnn, position_of(&text, "GruCell(hidden", 1), true);
    assert_eq!(found.iter().filter(|(u, _, _)| u == ggsnn).count(), 2, "{found:?}");
    let library: Vec<_> = found.iter().filter(|(u, _, _)| u != ggsnn).collect();
    assert_eq!(library.len(), 1, "{found:?}");
    assert!(library[0].0.ends_with("/nn.amp"), "{found:?}");
    assert_eq!(session.shut_down(), Some(0));
}

/// `text` with a rename's edits of `uri` applied (ASCII text: columns are bytes).
fn apply_rename(text: &str, uri: &str, response: &Value) -> String {
    let edits = response["result"]["changes"][uri].as_array().cloned().unwrap_or_else(|| panic!("edits: {response}"));
    let line_starts: Vec<usize> = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
    let offset = |p: &Value| {
        let line = p["line"].as_u64().unwrap_or(0) as usize;
        line_starts[line] + p["character"].as_u64().unwrap_or(0) as usize
    };
    let mut spans: Vec<(usize, usize, String)> = edits
        .iter()
        .map(|e| {
            (
                offset(&e["range"]["start"]),
                offset(&e["range"]["end"]),
                e["newText"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    spans.sort_by_key(|(start, _, _)| std::cmp::Reverse(*start));
    let mut result = text.to_string();
    for (start, end, new_text) in spans {
        result.replace_range(start..end, &new_text);
    }
    result
}

fn rename_params(uri: &str, position: Value, new_name: &str) -> Value {
    let mut params = at(uri, position);
    params["newName"] = json!(new_name);
    params
}

#[test]
fn rename_changes_every_occurrence_and_refuses_what_it_cannot_rename() {
    let mut session = Session::start();
    let capabilities_checked =
        session.request("textDocument/prepareRename", at("file:///none.amp", json!({ "line": 0, "character": 0 })));
    assert_eq!(capabilities_checked["error"]["code"], json!(-32803), "{capabilities_checked}");
    let uri = "file:///examples/list_reduce.amp";
    let text = example("list_reduce.amp");
    session.open(uri, &text);
    session.diagnostics_for(uri);

    let prepared = session.request("textDocument/prepareRename", at(uri, position_of(&text, "head(h)", 5)));
    assert_eq!(prepared["result"]["placeholder"], json!("h"), "{prepared}");
    assert_eq!(prepared["result"]["range"]["start"], position_of(&text, "head(h)", 5));
    let renamed = session.request("textDocument/rename", rename_params(uri, position_of(&text, "head(h)", 5), "state"));
    let text = apply_rename(&text, uri, &renamed);
    assert!(text.contains("var state: f32[hidden]") && text.contains("head(state)"), "{text}");
    session.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": [{ "text": text }] }),
    );
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new(), "{text}");
    let renamed =
        session.request("textDocument/rename", rename_params(uri, position_of(&text, "hidden: int", 0), "width"));
    let text = apply_rename(&text, uri, &renamed);
    assert!(!text.contains("hidden"), "{text}");
    assert_eq!(text.matches("width").count(), 6, "{text}");
    let renamed_uri = "file:///examples/list_reduce_renamed.amp";
    session.open(renamed_uri, &text);
    assert_eq!(session.diagnostics_for(renamed_uri), Vec::<Value>::new(), "{text}");

    // Refusals are errors with a reason, and the server goes on.
    let refused = [
        (uri, position_of(&text, "head(state)", 5), "2x", "not an identifier"),
        (uri, position_of(&text, "head(state)", 5), "tok", "in scope"),
        (uri, position_of(&text, "width: int", 0), "vocab", "in scope"),
        (uri, position_of(&text, "relu(", 1), "activate", "nothing to rename"),
        (uri, position_of(&text, "fn forward", 0), "f", "nothing to rename"),
    ];
    let ggsnn = "file:///examples/ggsnn.amp";
    let library = example("ggsnn.amp");
    session.open(ggsnn, &library);
    session.diagnostics_for(ggsnn);
    let in_library = (ggsnn, position_of(&library, "GruCell(hidden", 1), "Cell", "standard library");
    for (uri, position, new_name, reason) in refused.into_iter().chain([in_library]) {
        let response = session.request("textDocument/rename", rename_params(uri, position, new_name));
        assert_eq!(response["error"]["code"], json!(-32803), "{response}");
        let message = response["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{new_name}: {message}");
    }
    let prepared = session.request("textDocument/prepareRename", at(ggsnn, position_of(&library, "GruCell(hidden", 1)));
    assert_eq!(prepared["error"]["code"], json!(-32803), "{prepared}");
    assert_eq!(session.shut_down(), Some(0));
}

#[test]
fn semantic_tokens_tell_the_kinds_of_names_apart() {
    let mut session = Session::start();
    let uri = "file:///examples/ggsnn.amp";
    let text = example("ggsnn.amp");
    session.open(uri, &text);
    session.diagnostics_for(uri);
    let response = session.request("textDocument/semanticTokens/full", json!({ "textDocument": { "uri": uri } }));
    let data: Vec<u64> = response["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("tokens: {response}"))
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(data.len() % 5, 0);
    // Decoded: (line, column) -> (type index, modifiers).
    let mut tokens = std::collections::HashMap::new();
    let (mut line, mut column) = (0, 0);
    for token in data.chunks(5) {
        if token[0] > 0 {
            column = 0;
        }
        line += token[0];
        column += token[1];
        tokens.insert((line, column), (token[3], token[4]));
    }
    let legend = [
        "parameter",
        "typeParameter",
        "variable",
        "property",
        "struct",
        "class",
        "function",
        "enum",
        "enumMember",
        "param",
    ];
    let kind_at = |needle: &str, delta: usize| {
        let p = position_of(&text, needle, delta);
        let key = (p["line"].as_u64().unwrap_or(0), p["character"].as_u64().unwrap_or(0));
        tokens.get(&key).map(|(t, m)| (legend[*t as usize], *m))
    };
    // Modifier bits: declaration 1, readonly 2, defaultLibrary 4.
    assert_eq!(kind_at("GruCell(hidden", 0), Some(("class", 4)), "{response}");
    assert_eq!(kind_at("gru = GruCell", 0), Some(("param", 1)));
    assert_eq!(kind_at("hidden, hidden)", 0), Some(("typeParameter", 2)));
    assert_eq!(kind_at("g: Graph", 0), Some(("parameter", 1)));
    assert_eq!(kind_at("g.nodes.map", 0), Some(("parameter", 0)));
    assert_eq!(kind_at("|k| emb(k)", 1), Some(("variable", 1)));
    assert_eq!(kind_at("emb(k)", 0), Some(("param", 0)));
    assert_eq!(kind_at("e.kind", 2), Some(("property", 0)));
    assert_eq!(kind_at("Graph {", 0), Some(("struct", 1)));
    assert_eq!(kind_at("forward(g)", 0), Some(("function", 0)));
    assert_eq!(session.shut_down(), Some(0));
}

/// The signature help at the end of the first occurrence of `needle`.
fn signature_help(session: &mut Session, uri: &str, text: &str, needle: &str) -> Value {
    let answer = session.request("textDocument/signatureHelp", at(uri, position_of(text, needle, needle.len())));
    answer["result"].clone()
}

#[test]
fn signature_help_for_builtins_fns_and_layers_while_the_line_is_half_typed() {
    let mut session = Session::start();
    // A half-typed line in the loop of ggsnn: it does not parse.
    let text = example("ggsnn.amp").replace(
        "        head(sum(h))",
        "        let t = concat(h[0], gru(head(h[0]), \n        let u = forward(\n        head(sum(h))",
    );
    let uri = "file:///tmp/amp-lsp-test/signature-help.amp";
    session.open(uri, &text);
    assert!(!session.diagnostics_for(uri).is_empty());

    let concat = signature_help(&mut session, uri, &text, "concat(h[0], ");
    assert_eq!(concat["signatures"][0]["label"], "concat(a: f32[n], b: f32[m], ...) -> f32[n + m + ...]", "{concat}");
    assert_eq!(concat["activeParameter"], 1, "{concat}");

    let gru = signature_help(&mut session, uri, &text, "gru(head(h[0]), ");
    let label = gru["signatures"][0]["label"].as_str().unwrap_or_default();
    assert!(label.starts_with("gru(x: f32[input]") && label.contains(", h: f32[hidden]"), "{gru}");
    assert_eq!(gru["activeParameter"], 1, "{gru}");
    assert_eq!(gru["signatures"][0]["parameters"].as_array().map(Vec::len), Some(2), "{gru}");

    let forward = signature_help(&mut session, uri, &text, "let u = forward(");
    assert_eq!(forward["signatures"][0]["label"], "forward(g: Graph) -> f32[classes] (= f32[2])", "{forward}");
    assert_eq!(forward["activeParameter"], 0, "{forward}");

    let loss = signature_help(&mut session, uri, &text, "cross_entropy(forward(g), ");
    assert_eq!(loss["signatures"][0]["label"], "cross_entropy(logits: f32[c], label: int) -> f32", "{loss}");
    assert_eq!(loss["activeParameter"], 1, "{loss}");
    assert_eq!(loss["signatures"][0]["parameters"][1]["label"], json!([30, 40]), "{loss}");

    // Outside any call: nothing.
    assert_eq!(signature_help(&mut session, uri, &text, "param emb"), Value::Null);
    assert_eq!(session.shut_down(), Some(0));
}

/// The quick fixes for the whole of `uri`: (title, range, new text) of each edit.
fn quick_fixes(session: &mut Session, uri: &str, text: &str) -> Vec<(String, Value, String)> {
    let range = whole(text);
    let params = json!({ "textDocument": { "uri": uri }, "range": range, "context": { "diagnostics": [] } });
    let answer = session.request("textDocument/codeAction", params);
    let actions = answer["result"].as_array().cloned().unwrap_or_default();
    actions
        .iter()
        .flat_map(|a| {
            let edits = a["edit"]["changes"][uri].as_array().cloned().unwrap_or_default();
            let title = a["title"].as_str().unwrap_or_default().to_string();
            edits.into_iter().map(move |e| {
                (title.clone(), e["range"].clone(), e["newText"].as_str().unwrap_or_default().to_string())
            })
        })
        .collect()
}

#[test]
fn quick_fixes_add_a_missing_loss_and_import_a_standard_layer() {
    let mut session = Session::start();
    let text = "record Sample { v: f32[4], class: int }\nmodel M(n: int = 4) {\n    param m = Mlp(n, n, n);\n    \
                fn forward(x: Sample) -> f32[4] { m(x.v) }\n}\n";
    let uri = "file:///tmp/amp-lsp-test/fixes.amp";
    session.open(uri, text);
    let codes: Vec<Value> = session.diagnostics_for(uri).iter().map(|d| d["code"].clone()).collect();
    assert!(codes.contains(&json!("E0501")) && codes.contains(&json!("E0100")), "{codes:?}");
    let fixes = quick_fixes(&mut session, uri, text);
    let import = fixes.iter().find(|f| f.0 == "Add `use std::nn::Mlp;`").unwrap_or_else(|| panic!("{fixes:?}"));
    assert_eq!(import.1, json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 0, "character": 0 } }));
    assert_eq!(import.2, "use std::nn::Mlp;\n");
    let loss = fixes.iter().find(|f| f.0 == "Add a `loss` function").unwrap_or_else(|| panic!("{fixes:?}"));
    assert_eq!(loss.1, json!({ "start": { "line": 4, "character": 0 }, "end": { "line": 4, "character": 0 } }));
    assert_eq!(loss.2, "    fn loss(x: Sample) -> f32 { cross_entropy(forward(x), x.class) }\n");

    // Both applied: the file checks.
    let before_brace = &text[..text.rfind('}').expect("the model's brace")];
    let fixed = format!("{}{before_brace}{}}}\n", import.2, loss.2);
    session.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": [{ "text": fixed }] }),
    );
    assert_eq!(session.diagnostics_for(uri), Vec::<Value>::new(), "{fixed}");
    assert_eq!(session.shut_down(), Some(0));
}

/// A project of three files (examples/shared/encoders.amp and the two models that import
/// it), in a workspace folder: the model checks with the module, goto reaches the
/// module's file, an unsaved edit of the module re-checks the open model, renaming the
/// shared layer edits all three files, and workspace symbols list every file's
/// declarations.
#[test]
fn a_project_of_several_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir(root.join("shared")).expect("shared/");
    for name in ["shared/encoders.amp", "sentiment_tree.amp", "sentiment_bag.amp"] {
        std::fs::write(root.join(name), example(name)).expect("written");
    }
    let uri = |name: &str| format!("file://{}", root.join(name).display());
    let (tree, encoders) = (uri("sentiment_tree.amp"), uri("shared/encoders.amp"));
    let mut session = Session::start_with(json!({ "processId": null, "rootUri": uri(""), "capabilities": {} }));
    let tree_text = example("sentiment_tree.amp");
    session.open(&tree, &tree_text);
    assert_eq!(session.diagnostics_for(&tree), Vec::<Value>::new());

    let on_layer = position_of(&tree_text, "WordEncoder(vocab", 1);
    let definition = session.request("textDocument/definition", at(&tree, on_layer.clone()));
    assert_eq!(definition["result"]["uri"], json!(encoders), "{definition}");

    // An unsaved edit of the module: the open model is checked against the buffer.
    let encoders_text = example("shared/encoders.amp");
    session.open(&encoders, &encoders_text);
    assert_eq!(session.diagnostics_for(&encoders), Vec::<Value>::new());
    // Opening the module re-checks the model that imports it.
    assert_eq!(session.diagnostics_for(&tree), Vec::<Value>::new());
    let broken = encoders_text.replace("pub layer WordEncoder", "layer WordEncoder");
    let change = json!({ "textDocument": { "uri": encoders, "version": 2 }, "contentChanges": [{ "text": broken }] });
    session.notify("textDocument/didChange", change);
    let republished = session.diagnostics_for(&tree);
    assert_eq!(republished.len(), 1, "{republished:?}");
    assert_eq!(republished[0]["code"], json!("E0111"));
    let change =
        json!({ "textDocument": { "uri": encoders, "version": 3 }, "contentChanges": [{ "text": encoders_text }] });
    session.notify("textDocument/didChange", change);
    assert_eq!(session.diagnostics_for(&tree), Vec::<Value>::new());

    let mut params = at(&tree, on_layer);
    params["newName"] = json!("TokenEncoder");
    let rename = session.request("textDocument/rename", params);
    let changes = rename["result"]["changes"].as_object().cloned().expect("changes");
    let edits = |name: &str| changes.get(&uri(name)).and_then(Value::as_array).map_or(0, Vec::len);
    assert_eq!(
        [edits("shared/encoders.amp"), edits("sentiment_tree.amp"), edits("sentiment_bag.amp")],
        [1, 2, 2],
        "{rename}"
    );

    let symbols = session.request("workspace/symbol", json!({ "query": "" }));
    let symbols = symbols["result"].as_array().cloned().expect("symbols");
    let in_file = |name: &str| symbols.iter().filter(|s| s["location"]["uri"] == json!(uri(name))).count();
    assert!(in_file("shared/encoders.amp") >= 8 && in_file("sentiment_bag.amp") >= 6, "{symbols:?}");
    let found = session.request("workspace/symbol", json!({ "query": "wordenc" }));
    let found = found["result"].as_array().cloned().expect("symbols");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["location"]["uri"], json!(encoders));
    assert_eq!(session.shut_down(), Some(0));
}
