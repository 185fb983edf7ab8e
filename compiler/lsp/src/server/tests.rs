//! The server loop against a client over an in-memory connection.

use super::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// The client side of an in-memory connection to a server running on a thread.
struct Client {
    connection: Connection,
    server: std::thread::JoinHandle<Result<(), ServerError>>,
}

impl Client {
    fn start() -> Client {
        let (server_side, connection) = Connection::memory();
        let server = std::thread::spawn(move || serve(&server_side, StdlibFiles::none()));
        let client = Client { connection, server };
        let init = client.request(1, "initialize", json!({ "capabilities": {} }));
        assert!(init.response_result.is_ok(), "{init:?}");
        client.notify("initialized", json!({}));
        client
    }

    fn receive(&self) -> Message {
        match self.connection.receiver.recv_timeout(Duration::from_secs(10)) {
            Ok(message) => message,
            Err(e) => panic!("no message from the server: {e}"),
        }
    }

    fn request(&self, id: i32, method: &str, params: Value) -> Response {
        let request = Request { id: id.into(), method: method.into(), params };
        self.connection.sender.send(request.into()).expect("server alive");
        loop {
            if let Message::Response(response) = self.receive() {
                return response;
            }
        }
    }

    fn notify(&self, method: &str, params: Value) {
        let notification = Notification { method: method.into(), params };
        self.connection.sender.send(notification.into()).expect("server alive");
    }

    /// Opens `text` as version 1 of the document at `uri`.
    fn open(&self, uri: &str, text: &str) {
        let document = json!({ "uri": uri, "languageId": "amp", "version": 1, "text": text });
        self.notify("textDocument/didOpen", json!({ "textDocument": document }));
    }

    fn stop(self) -> Result<(), ServerError> {
        let Client { connection, server } = self;
        let _ = connection.sender.send(Notification { method: "exit".into(), params: Value::Null }.into());
        server.join().expect("the server thread does not panic")
    }
}

fn error_code(response: &Response) -> Option<i32> {
    response.response_result.as_ref().err().map(|e| e.code)
}

#[test]
fn malformed_and_unknown_requests_get_errors_not_panics() {
    let client = Client::start();
    let bad = client.request(2, "textDocument/hover", json!({ "textDocument": 5 }));
    assert_eq!(error_code(&bad), Some(ErrorCode::InvalidParams as i32));
    let unknown = client.request(3, "textDocument/frobnicate", json!({}));
    assert_eq!(error_code(&unknown), Some(ErrorCode::MethodNotFound as i32));
    // A malformed notification is dropped; the server still answers.
    client.notify("textDocument/didOpen", json!({ "textDocument": "nope" }));
    let closed = client.request(
        4,
        "textDocument/hover",
        json!({ "textDocument": { "uri": "file:///never-opened.amp" }, "position": { "line": 0, "character": 0 } }),
    );
    assert_eq!(closed.response_result.ok(), Some(Value::Null));
    let shutdown = client.request(5, "shutdown", Value::Null);
    assert_eq!(shutdown.response_result.ok(), Some(Value::Null));
    let late = client.request(6, "textDocument/hover", json!({}));
    assert_eq!(error_code(&late), Some(ErrorCode::InvalidRequest as i32));
    assert!(client.stop().is_ok());
}

/// Positions outside the document's text (a line past the last) are refused with
/// `InvalidParams`, where an answer at a clamped position would be about another
/// token; a change with such a range is not applied; the server goes on serving.
#[test]
fn positions_outside_the_text_are_refused() {
    let client = Client::start();
    let uri = "file:///m.amp";
    let text = "model M(n: int = 4) {\n    fn forward(x: f32[n]) -> f32[n] { tanh(x) }\n}\n";
    client.open(uri, text);
    let hover = |id: i32, line: u32, character: u32| {
        let at = json!({ "textDocument": { "uri": uri }, "position": { "line": line, "character": character } });
        client.request(id, "textDocument/hover", at)
    };
    // `tanh(x)`'s `x`, column 43 of line 1.
    let inside = hover(2, 1, 43);
    assert!(inside.response_result.as_ref().is_ok_and(|v| v.to_string().contains("f32")), "{inside:?}");
    for (id, (line, character)) in [(3, (9, 0)), (5, (4, 0))] {
        let refused = hover(id, line, character);
        assert_eq!(error_code(&refused), Some(ErrorCode::InvalidParams as i32), "{line}:{character}");
        let message = refused.response_result.err().map(|e| e.message).unwrap_or_default();
        assert!(message.contains(&format!("position {line}:{character} is outside")), "{message}");
    }
    // Past a line's end is the line's end, as the protocol says; a hover there shows
    // nothing (it showed the enclosing expression's type).
    assert_eq!(hover(4, 1, 60).response_result.ok(), Some(Value::Null));
    let range = json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 7, "character": 0 } });
    let hints = client.request(6, "textDocument/inlayHint", json!({ "textDocument": { "uri": uri }, "range": range }));
    assert_eq!(error_code(&hints), Some(ErrorCode::InvalidParams as i32));
    // A change past the end is not applied: `x` is still where it was.
    let change = json!({ "range": { "start": { "line": 8, "character": 0 }, "end": { "line": 8, "character": 1 } }, "text": "!" });
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": [change] }),
    );
    let still = hover(7, 1, 43);
    assert!(still.response_result.as_ref().is_ok_and(|v| v.to_string().contains("f32")), "{still:?}");
    client.request(8, "shutdown", Value::Null);
    assert!(client.stop().is_ok());
}

/// Code actions by kind: a client that asks only for `refactor` gets the assists, one
/// that asks for `quickfix` the fixes, and one that names no kind both.
#[test]
fn code_actions_are_given_by_the_kinds_asked_for() {
    let client = Client::start();
    let uri = "file:///m.amp";
    let text = "model M(n: int = 4) {\n    fn forward(x: f32[n]) -> f32[n] {\n        let unused = 2;\n        tanh(x) * 2.0\n    }\n}\n";
    client.open(uri, text);
    // `unused` (its `let`'s name), then `tanh(x)`, selected.
    let kinds = |id: i32, range: Value, only: Value| -> Vec<String> {
        let context =
            if only.is_null() { json!({ "diagnostics": [] }) } else { json!({ "diagnostics": [], "only": only }) };
        let params = json!({ "textDocument": { "uri": uri }, "range": range, "context": context });
        let answer = client.request(id, "textDocument/codeAction", params).response_result.unwrap_or(Value::Null);
        let actions = answer.as_array().cloned().unwrap_or_default();
        actions.iter().map(|a| a["kind"].as_str().unwrap_or("").to_string()).collect()
    };
    let name = json!({ "start": { "line": 2, "character": 12 }, "end": { "line": 2, "character": 18 } });
    let tanh = json!({ "start": { "line": 3, "character": 8 }, "end": { "line": 3, "character": 15 } });
    assert_eq!(kinds(2, tanh.clone(), json!(["refactor"])), ["refactor.extract"]);
    assert_eq!(kinds(3, tanh, json!(["quickfix"])), Vec::<String>::new());
    let all = kinds(4, name.clone(), Value::Null);
    assert!(all.contains(&"quickfix".to_string()) && all.contains(&"refactor.inline".to_string()), "{all:?}");
    assert_eq!(kinds(5, name, json!(["refactor.rewrite"])), ["refactor.rewrite"]);
    client.request(6, "shutdown", Value::Null);
    assert!(client.stop().is_ok());
}

/// Edits queued behind a check (50 keystrokes into a big file, each followed by the
/// requests an editor sends): the requests about text already changed again are
/// answered `ContentModified` at once, the edits between are applied without a check,
/// and only the latest text is checked before the last request is answered (issue 48,
/// finding 9: each edit was checked in full and the requests waited behind them all).
#[test]
fn queued_edits_are_checked_once_and_outdated_requests_answered_at_once() {
    let (server_side, client) = Connection::memory();
    let uri = "file:///typing.amp";
    let send = |message: Message| client.sender.send(message).expect("the channel is open");
    let request =
        |id: i32, method: &str, params: Value| send(Request { id: id.into(), method: method.into(), params }.into());
    let notify = |method: &str, params: Value| send(Notification { method: method.into(), params }.into());
    let text = |v: i32| format!("model M() {{ fn forward(x: f32) -> f32 {{ foo{v} }} }}");
    let change =
        |v: i32| json!({ "textDocument": { "uri": uri, "version": v }, "contentChanges": [{ "text": text(v) }] });
    let hover = json!({ "textDocument": { "uri": uri }, "position": { "line": 0, "character": 1 } });
    // Everything is queued before the server reads its first message.
    request(1, "initialize", json!({ "capabilities": {} }));
    notify("initialized", json!({}));
    let open = json!({ "textDocument": { "uri": uri, "languageId": "amp", "version": 1, "text": text(1) } });
    notify("textDocument/didOpen", open);
    for v in 2..=50 {
        notify("textDocument/didChange", change(v));
        request(v, "textDocument/hover", hover.clone());
    }
    notify("textDocument/didChange", change(51));
    request(51, "textDocument/hover", hover.clone());
    request(52, "shutdown", Value::Null);
    notify("exit", Value::Null);
    serve(&server_side, StdlibFiles::none()).expect("a clean exit");
    let mut published = Vec::new();
    let mut answers = BTreeMap::new();
    for message in client.receiver.try_iter() {
        match message {
            Message::Notification(n) => published.push(n.params["version"].as_i64()),
            Message::Response(r) => {
                let code = r.response_result.as_ref().err().map(|e| e.code);
                answers.insert(r.id.to_string().parse::<i32>().expect("a number id"), code);
            }
            Message::Request(_) => {}
        }
    }
    assert_eq!(published, [Some(1), Some(51)], "the opened text and the last edit are checked, no other");
    for v in 2..=50 {
        assert_eq!(answers[&v], Some(ErrorCode::ContentModified as i32), "request {v}");
    }
    assert_eq!(answers[&51], None, "the request after the last edit is answered");
}

#[test]
fn exit_without_shutdown_is_an_error() {
    let client = Client::start();
    assert!(matches!(client.stop(), Err(ServerError::ExitWithoutShutdown)));
}

#[test]
fn open_publishes_diagnostics_and_close_clears_them() {
    let client = Client::start();
    let uri = "file:///broken.amp";
    client.open(uri, "model M() { fn forward(x: f32) -> f32 { foo } }");
    let published = loop {
        if let Message::Notification(n) = client.receive() {
            break n;
        }
    };
    assert_eq!(published.method, "textDocument/publishDiagnostics");
    let codes: Vec<&str> = published.params["diagnostics"]
        .as_array()
        .map(|list| list.iter().filter_map(|d| d["code"].as_str()).collect())
        .unwrap_or_default();
    assert!(codes.contains(&"E0100"), "{codes:?}");
    client.notify("textDocument/didClose", json!({ "textDocument": { "uri": uri } }));
    let cleared = client.receive();
    let Message::Notification(cleared) = cleared else {
        panic!("expected a notification, got {cleared:?}");
    };
    assert_eq!(cleared.params["diagnostics"], json!([]));
    client.request(2, "shutdown", Value::Null);
    assert!(client.stop().is_ok());
}
