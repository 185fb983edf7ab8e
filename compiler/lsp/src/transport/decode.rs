//! Decoding: a framed body becomes an `lsp_server::Message`, or a [`Rejection`] that says
//! which JSON-RPC error it deserves and, where the body still names one, the id to answer.
//!
//! The body is parsed to a `serde_json::Value` first (serde_json bounds its own nesting),
//! then sorted by hand rather than by `Message`'s untagged deserializer: that one would
//! take `{"id": 1.5, "method": "m"}` for a notification and leave the client waiting, and
//! cannot say which part of a message was wrong.

use lsp_server::{ErrorCode, Message, Notification, Request, RequestId, Response};
use serde_json::{Map, Value};

/// A body that is not a message the server can act on.
#[derive(Debug)]
pub struct Rejection {
    /// The request to answer with the error; `None` when none can be recovered (the
    /// error is then only logged: JSON-RPC has no way to address it).
    pub id: Option<RequestId>,
    pub code: ErrorCode,
    pub message: String,
}

impl Rejection {
    fn new(id: Option<RequestId>, code: ErrorCode, message: impl Into<String>) -> Self {
        Rejection { id, code, message: message.into() }
    }

    /// The error response owed to the client, if it can be addressed.
    pub fn response(&self) -> Option<Response> {
        let id = self.id.clone()?;
        Some(Response::new_err(id, self.code as i32, self.message.clone()))
    }
}

pub fn decode(body: &[u8]) -> Result<Message, Rejection> {
    let text = match std::str::from_utf8(body) {
        Ok(text) => text,
        Err(e) => {
            // The id usually lies outside the broken string: answer it if it is readable,
            // so the client does not wait for a response that never comes.
            let lossy = String::from_utf8_lossy(body);
            let id = serde_json::from_str::<Value>(&lossy).ok().as_ref().and_then(recoverable_id);
            return Err(Rejection::new(id, ErrorCode::ParseError, format!("the message is not UTF-8: {e}")));
        }
    };
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Rejection::new(None, ErrorCode::ParseError, format!("the message is not JSON: {e}")))?;
    classify(value)
}

/// The id of a JSON object that has one LSP allows (an integer in i32 or a string).
fn recoverable_id(value: &Value) -> Option<RequestId> {
    request_id(value.as_object()?.get("id")?)
}

fn request_id(id: &Value) -> Option<RequestId> {
    match id {
        Value::Number(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()).map(RequestId::from),
        Value::String(s) => Some(RequestId::from(s.clone())),
        _ => None,
    }
}

/// Sorts a JSON value into a request (method and id), a notification (method, no id) or
/// a response (id and `result` or `error`).
fn classify(value: Value) -> Result<Message, Rejection> {
    let mut object = match value {
        Value::Object(object) => object,
        other => {
            let message = format!("the message is {}, not an object", kind_of(&other));
            return Err(Rejection::new(None, ErrorCode::InvalidRequest, message));
        }
    };
    let id = match object.remove("id") {
        None => None,
        Some(raw) => match request_id(&raw) {
            Some(id) => Some(id),
            None => {
                let message = format!("the message's id `{}` is neither an i32 nor a string", shorten(&raw));
                return Err(Rejection::new(None, ErrorCode::InvalidRequest, message));
            }
        },
    };
    let params = object.remove("params").unwrap_or(Value::Null);
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Ok(Request { id, method, params }.into()),
        (Some(Value::String(method)), None) => Ok(Notification { method, params }.into()),
        (Some(method), id) => {
            let message = format!("the message's method `{}` is not a string", shorten(&method));
            Err(Rejection::new(id, ErrorCode::InvalidRequest, message))
        }
        (None, Some(id)) if object.contains_key("result") || object.contains_key("error") => response(object, id),
        (None, id) => Err(Rejection::new(id, ErrorCode::InvalidRequest, "the message has no `method`")),
    }
}

/// A response from the client. The server sends no requests, so none is awaited; a
/// malformed one is only logged (answering a response would start a loop of errors).
fn response(mut object: Map<String, Value>, id: RequestId) -> Result<Message, Rejection> {
    let id_value = serde_json::to_value(&id).unwrap_or(Value::Null);
    object.insert("id".to_string(), id_value);
    serde_json::from_value::<Response>(Value::Object(object))
        .map(Message::Response)
        .map_err(|e| Rejection::new(None, ErrorCode::InvalidRequest, format!("a malformed response: {e}")))
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "an array (batches are not part of LSP)",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
        Value::Object(_) => "an object",
    }
}

/// A JSON value for a log line, cut to a readable length.
fn shorten(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(body: &[u8]) -> Rejection {
        match decode(body) {
            Ok(message) => panic!("accepted {message:?}"),
            Err(rejection) => rejection,
        }
    }

    #[test]
    fn well_formed_messages_keep_lsp_servers_types() {
        let request = decode(br#"{"jsonrpc":"2.0","id":"a","method":"shutdown"}"#);
        assert!(
            matches!(request, Ok(Message::Request(r)) if r.id == RequestId::from("a".to_string()) && r.params.is_null())
        );
        let notification = decode(br#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#);
        assert!(matches!(notification, Ok(Message::Notification(n)) if n.method == "initialized"));
        let response = decode(br#"{"jsonrpc":"2.0","id":4,"result":null}"#);
        assert!(matches!(response, Ok(Message::Response(r)) if r.id == RequestId::from(4)));
    }

    #[test]
    fn invalid_json_and_non_objects_cannot_be_answered() {
        let invalid = rejected(b"{abc}");
        assert_eq!((invalid.id, invalid.code as i32), (None, ErrorCode::ParseError as i32));
        for body in [&b"[1, 2]"[..], b"42", b"\"text\"", b"null", b"true"] {
            let non_object = rejected(body);
            assert_eq!((non_object.id, non_object.code as i32), (None, ErrorCode::InvalidRequest as i32));
        }
    }

    #[test]
    fn a_recoverable_id_is_answered() {
        let no_method = rejected(br#"{"jsonrpc":"2.0","id":7,"params":{}}"#);
        assert_eq!(no_method.id, Some(RequestId::from(7)));
        assert_eq!(no_method.code as i32, ErrorCode::InvalidRequest as i32);
        let bad_method = rejected(br#"{"id":"x","method":5}"#);
        assert_eq!(bad_method.id, Some(RequestId::from("x".to_string())));
        let mut not_utf8 = br#"{"jsonrpc":"2.0","id":8,"method":"textDocument/hover","params":""#.to_vec();
        not_utf8.extend_from_slice(b"\xff\xfe\"}");
        let not_utf8 = rejected(&not_utf8);
        assert_eq!((not_utf8.id, not_utf8.code as i32), (Some(RequestId::from(8)), ErrorCode::ParseError as i32));
        assert!(rejected(b"\xff").id.is_none());
    }

    #[test]
    fn ids_lsp_does_not_allow_are_refused_not_taken_for_notifications() {
        for id in ["1.5", "null", "[1]", "3000000000", "{}"] {
            let body = format!(r#"{{"id":{id},"method":"textDocument/hover"}}"#);
            let refused = rejected(body.as_bytes());
            assert_eq!((refused.id, refused.code as i32), (None, ErrorCode::InvalidRequest as i32), "{id}");
        }
        assert!(rejected(br#"{"id":1,"error":"not an object"}"#).id.is_none());
    }
}
