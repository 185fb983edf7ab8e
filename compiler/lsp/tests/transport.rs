//! The server over raw bytes, without processes (`amp_lsp::serve_bytes`): malformed
//! messages of every kind are answered or dropped and the server goes on, and random
//! byte streams never make it panic, hang or lose a later well-formed request.

use amp_lsp::{serve_bytes, ServerError, MAX_CONTENT_LENGTH};
use lsp_server::{Message, RequestId, Response};
use proptest::prelude::*;
use serde_json::{json, Value};

fn frame(body: &[u8]) -> Vec<u8> {
    let mut framed = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    framed.extend_from_slice(body);
    framed
}

fn message(value: Value) -> Vec<u8> {
    frame(value.to_string().as_bytes())
}

fn request(id: i32, method: &str, params: Value) -> Vec<u8> {
    message(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
}

fn notification(method: &str, params: Value) -> Vec<u8> {
    message(json!({ "jsonrpc": "2.0", "method": method, "params": params }))
}

/// `initialize` (id 1) and `initialized`.
fn handshake() -> Vec<u8> {
    let mut bytes = request(1, "initialize", json!({ "capabilities": {} }));
    bytes.extend(notification("initialized", json!({})));
    bytes
}

/// A hover on a document never opened: answered with `null`.
fn probe(id: i32) -> Vec<u8> {
    let position = json!({ "textDocument": { "uri": "file:///none.amp" }, "position": { "line": 0, "character": 0 } });
    request(id, "textDocument/hover", position)
}

/// `shutdown` (id 9999) and `exit`.
fn goodbye() -> Vec<u8> {
    let mut bytes = request(9999, "shutdown", Value::Null);
    bytes.extend(notification("exit", Value::Null));
    bytes
}

fn session(middle: &[&[u8]]) -> (Result<(), ServerError>, Vec<Message>) {
    let mut bytes = handshake();
    for part in middle {
        bytes.extend_from_slice(part);
    }
    bytes.extend(goodbye());
    serve_bytes(&bytes)
}

fn response(messages: &[Message], id: i32) -> Option<&Response> {
    messages.iter().find_map(|m| match m {
        Message::Response(r) if r.id == RequestId::from(id) => Some(r),
        _ => None,
    })
}

fn error_code(messages: &[Message], id: i32) -> Option<i32> {
    response(messages, id).and_then(|r| r.response_result.as_ref().err()).map(|e| e.code)
}

/// Runs one malformed input between the handshake and a probe, and checks that the probe
/// is answered and the session ends cleanly.
fn survives(malformed: &[u8]) -> Vec<Message> {
    let (outcome, messages) = session(&[malformed, &probe(100)]);
    assert!(outcome.is_ok(), "{outcome:?} after {:?}", String::from_utf8_lossy(malformed));
    let answer = response(&messages, 100).map(|r| r.response_result.clone());
    assert_eq!(answer.map(Result::ok), Some(Some(Value::Null)), "{messages:?}");
    messages
}

#[test]
fn invalid_json_is_dropped() {
    let messages = survives(b"Content-Length: 5\r\n\r\n{abc}");
    // Nothing but the initialize answer, the probe's and shutdown's.
    assert_eq!(messages.len(), 3, "{messages:?}");
}

#[test]
fn bad_headers_are_skipped() {
    survives(b"Content-Length 5\r\n\r\n{abc}");
    survives(b"Content-Length: five\r\n\r\n{}");
    survives(b"\r\n\r\n");
    survives(format!("X-Long: {}\r\n\r\n", "x".repeat(10_000)).as_bytes());
}

#[test]
fn non_objects_are_dropped() {
    for body in [&b"[]"[..], b"[{\"id\":5,\"method\":\"shutdown\"}]", b"42", b"\"hi\"", b"null"] {
        survives(&frame(body));
    }
}

#[test]
fn a_message_without_a_method_gets_invalid_request() {
    let messages = survives(&message(json!({ "jsonrpc": "2.0", "id": 7, "params": {} })));
    assert_eq!(error_code(&messages, 7), Some(-32600));
    let messages = survives(&message(json!({ "jsonrpc": "2.0", "id": 8, "method": ["hover"] })));
    assert_eq!(error_code(&messages, 8), Some(-32600));
    // No id to answer: dropped.
    survives(&message(json!({ "jsonrpc": "2.0", "params": {} })));
}

#[test]
fn invalid_utf8_gets_a_parse_error_when_its_id_is_readable() {
    let mut body = br#"{"jsonrpc":"2.0","id":9,"method":"textDocument/hover","params":{"x":""#.to_vec();
    body.extend_from_slice(b"\xc3\x28\xff\"}}");
    let messages = survives(&frame(&body));
    assert_eq!(error_code(&messages, 9), Some(-32700));
    survives(&frame(b"\xff\xfe\xfd"));
}

#[test]
fn huge_content_lengths_are_refused_without_allocating() {
    for huge in ["1000000000000", "3000000000", "18446744073709551616", &(MAX_CONTENT_LENGTH + 1).to_string()] {
        let mut bytes = format!("Content-Length: {huge}\r\n\r\n").into_bytes();
        bytes.extend_from_slice(br#"{"jsonrpc":"2.0","id":11,"method":"shutdown"}"#);
        let messages = survives(&bytes);
        assert!(response(&messages, 11).is_none(), "the refused body is not read as a message");
    }
}

#[test]
fn requests_before_initialize_are_refused_and_the_handshake_still_completes() {
    let mut bytes = probe(50);
    bytes.extend(notification("$/setTrace", json!({ "value": "off" })));
    bytes.extend(handshake());
    bytes.extend(probe(51));
    bytes.extend(goodbye());
    let (outcome, messages) = serve_bytes(&bytes);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(error_code(&messages, 50), Some(-32002));
    assert!(response(&messages, 51).is_some_and(|r| r.response_result.is_ok()));
}

#[test]
fn only_the_end_of_input_or_exit_ends_the_server() {
    let mut bytes = handshake();
    bytes.extend_from_slice(b"Content-Length: 5\r\n\r\n{abc}");
    let (outcome, _) = serve_bytes(&bytes);
    assert!(matches!(outcome, Err(ServerError::Disconnected)), "{outcome:?}");
    let mut bytes = handshake();
    bytes.extend(notification("exit", Value::Null));
    bytes.extend(probe(60));
    let (outcome, messages) = serve_bytes(&bytes);
    assert!(matches!(outcome, Err(ServerError::ExitWithoutShutdown)), "{outcome:?}");
    assert!(response(&messages, 60).is_none(), "nothing is read after `exit`");
}

/// A part of a malformed stream: each kind the server must survive, plus random bytes
/// that do not contain a `Content-Length` header (one would frame what follows as its
/// body, which a protocol with length framing cannot tell from an honest message).
fn malformed_part() -> impl Strategy<Value = Vec<u8>> {
    let random = proptest::collection::vec(any::<u8>(), 0..200).prop_filter("no Content-Length header", |bytes| {
        !bytes.to_ascii_lowercase().windows(15).any(|w| w == b"content-length:")
    });
    prop_oneof![
        random,
        Just(b"Content-Length: 5\r\n\r\n{abc}".to_vec()),
        Just(b"Content-Length 5\r\n\r\n{abc}".to_vec()),
        Just(b"Content-Length: 1000000000000\r\n\r\n".to_vec()),
        Just(b"Content-Length: 3000000000\r\n\r\n{}".to_vec()),
        Just(frame(b"[1, 2, 3]")),
        Just(frame(b"\xff\xfe")),
        Just(frame(br#"{"id":3,"params":{}}"#)),
        Just(frame(br#"{"id":1.5,"method":"x"}"#)),
        Just(notification("textDocument/didOpen", json!({ "textDocument": 5 }))),
        (0..8u8).prop_map(|n| vec![b'\n'; usize::from(n)]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any bytes at all: the server never panics, and ends at the end of its input.
    #[test]
    fn arbitrary_bytes_never_stop_the_server_early(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut input = handshake();
        input.extend_from_slice(&bytes);
        let _ = serve_bytes(&input);
    }

    /// After any mix of malformed parts, a well-formed request is still answered.
    #[test]
    fn a_request_after_malformed_parts_is_answered(parts in proptest::collection::vec(malformed_part(), 0..6)) {
        let mut input = handshake();
        for part in &parts {
            input.extend_from_slice(part);
        }
        input.extend(probe(4242));
        input.extend(goodbye());
        let (outcome, messages) = serve_bytes(&input);
        prop_assert!(response(&messages, 4242).is_some(), "{:?}", messages);
        prop_assert!(outcome.is_ok(), "{:?}", outcome);
    }
}

/// The versions of the `publishDiagnostics` sent for `uri`, in order.
fn published_versions(output: &[Message], uri: &str) -> Vec<Option<i64>> {
    output
        .iter()
        .filter_map(|m| match m {
            Message::Notification(n) if n.method == "textDocument/publishDiagnostics" && n.params["uri"] == uri => {
                Some(n.params["version"].as_i64())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn an_edit_that_a_queued_edit_replaces_is_not_analysed() {
    let uri = "file:///stale.amp";
    let change = |version: i32, text: &str| {
        notification(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": version }, "contentChanges": [{ "text": text }] }),
        )
    };
    let mut bytes = handshake();
    let open = json!({ "textDocument": { "uri": uri, "languageId": "amp", "version": 1, "text": "model M {" } });
    bytes.extend(notification("textDocument/didOpen", open));
    // Versions 2, 3 and 4 are superseded before anything reads them: the request after 4
    // is about text that 5 changes again, so it is answered `ContentModified` at once and
    // does not make 4 be analysed; only 5, the last, is.
    bytes.extend(change(2, "model M {}"));
    bytes.extend(change(3, "model M { fn"));
    bytes.extend(change(4, "model N {}"));
    bytes.extend(request(7, "textDocument/documentSymbol", json!({ "textDocument": { "uri": uri } })));
    bytes.extend(change(5, "model O {}"));
    bytes.extend(request(8, "textDocument/documentSymbol", json!({ "textDocument": { "uri": uri } })));
    let (_, output) = serve_bytes(&bytes);
    assert_eq!(published_versions(&output, uri), [Some(1), Some(5)]);
    let answer = |wanted: i32| {
        output.iter().find_map(|m| match m {
            Message::Response(Response { id, response_result }) if *id == RequestId::from(wanted) => {
                Some(response_result.clone())
            }
            _ => None,
        })
    };
    let outdated = answer(7).expect("request 7 is answered");
    assert_eq!(outdated.err().map(|e| e.code), Some(-32801), "ContentModified");
    // The request after the last edit sees its analysis: its symbol is `O`.
    let symbols = answer(8).and_then(Result::ok);
    let names: Vec<&str> = symbols
        .as_ref()
        .and_then(Value::as_array)
        .map(|s| s.iter().filter_map(|s| s["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["O"]);
}
