//! The server loop: the LSP handshake, then one message at a time until `exit` (or the
//! end of stdin). Malformed input never reaches it: the transport answers or drops it.
//!
//! Notifications about documents update the [`Workspace`] (URI -> text and last
//! analysis) and publish the diagnostics of that document and of the open documents that
//! import it; requests are answered from the cached analyses by the handlers. All on one thread: an edit is checked before the next
//! request is answered, so answers always describe the latest text.
//!
//! Stale edits: before handling a message the loop takes every message already queued.
//! A request about a document that a queued `didChange` will change again is answered
//! `ContentModified` at once (its answer would describe text the client has left; the
//! client asks again). A `didChange` followed in the queue by another `didChange` of the
//! same document, with no request that needs its analysis, save or close in between, only
//! updates the text: its analysis would be replaced before anyone could read it, so it is
//! skipped. Typing fast into a big file, with the requests an editor sends after each
//! keystroke, costs one check per burst, not one per keystroke, and a request sent after
//! the burst waits for that one check only.

use crate::error_pages::error_pages_base;
use crate::handlers;
use crate::stdlib_files::StdlibFiles;
use crate::workspace::Workspace;
use lsp_server::{Connection, ErrorCode, Message, Notification, Request, RequestId, Response};
use lsp_types as lsp;
use lsp_types::notification::{self as note, Notification as _};
use lsp_types::request::{self as req, Request as _};
use serde_json::Value;
use std::collections::VecDeque;
use std::fmt;

/// Why the server stopped other than by `shutdown` followed by `exit`.
#[derive(Debug)]
pub enum ServerError {
    /// Reading stdin or writing stdout failed.
    Io(std::io::Error),
    /// A message could not be serialized.
    Json(serde_json::Error),
    /// The client went away without `exit`.
    Disconnected,
    /// `exit` came before `shutdown`; the protocol asks for exit status 1.
    ExitWithoutShutdown,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::Io(e) => write!(f, "i/o error: {e}"),
            ServerError::Json(e) => write!(f, "cannot serialize a message: {e}"),
            ServerError::Disconnected => f.write_str("the client closed the connection without `exit`"),
            ServerError::ExitWithoutShutdown => f.write_str("`exit` without `shutdown`"),
        }
    }
}

impl std::error::Error for ServerError {}

impl From<serde_json::Error> for ServerError {
    fn from(e: serde_json::Error) -> Self {
        ServerError::Json(e)
    }
}

/// Runs the language server on stdin/stdout until the client says `exit`.
pub fn run_stdio() -> Result<(), ServerError> {
    let stdlib = match StdlibFiles::materialise(&StdlibFiles::default_dir()) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("ampc lsp: cannot write the standard library for go-to-definition: {e}");
            StdlibFiles::none()
        }
    };
    let (connection, io_threads) = crate::transport::stdio().map_err(ServerError::Io)?;
    let outcome = serve(&connection, stdlib);
    // Dropping the connection closes the writer once the reader is done too.
    drop(connection);
    match outcome {
        // The reader has stopped: at `exit`, or at the end of stdin, which is what
        // disconnected the loop. Joining lets the writer send what is still queued.
        Ok(()) => io_threads.join().map_err(ServerError::Io),
        Err(ServerError::ExitWithoutShutdown | ServerError::Disconnected) => {
            let _ = io_threads.join();
            outcome
        }
        // A failed handshake leaves the reader blocked on stdin; the process ends anyway.
        Err(e) => Err(e),
    }
}

/// What the server announces in its `initialize` answer.
pub(crate) fn capabilities() -> lsp::ServerCapabilities {
    lsp::ServerCapabilities {
        position_encoding: Some(lsp::PositionEncodingKind::UTF16),
        text_document_sync: Some(lsp::TextDocumentSyncCapability::Options(lsp::TextDocumentSyncOptions {
            open_close: Some(true),
            change: Some(lsp::TextDocumentSyncKind::INCREMENTAL),
            save: Some(lsp::TextDocumentSyncSaveOptions::SaveOptions(lsp::SaveOptions { include_text: Some(true) })),
            ..lsp::TextDocumentSyncOptions::default()
        })),
        hover_provider: Some(lsp::HoverProviderCapability::Simple(true)),
        definition_provider: Some(lsp::OneOf::Left(true)),
        document_symbol_provider: Some(lsp::OneOf::Left(true)),
        document_formatting_provider: Some(lsp::OneOf::Left(true)),
        document_range_formatting_provider: Some(lsp::OneOf::Left(true)),
        inlay_hint_provider: Some(lsp::OneOf::Left(true)),
        folding_range_provider: Some(lsp::FoldingRangeProviderCapability::Simple(true)),
        document_highlight_provider: Some(lsp::OneOf::Left(true)),
        references_provider: Some(lsp::OneOf::Left(true)),
        workspace_symbol_provider: Some(lsp::OneOf::Left(true)),
        semantic_tokens_provider: Some(lsp::SemanticTokensServerCapabilities::SemanticTokensOptions(
            lsp::SemanticTokensOptions {
                legend: handlers::semantic_tokens_legend(),
                full: Some(lsp::SemanticTokensFullOptions::Bool(true)),
                ..lsp::SemanticTokensOptions::default()
            },
        )),
        rename_provider: Some(lsp::OneOf::Right(lsp::RenameOptions {
            prepare_provider: Some(true),
            work_done_progress_options: lsp::WorkDoneProgressOptions::default(),
        })),
        code_action_provider: Some(lsp::CodeActionProviderCapability::Options(lsp::CodeActionOptions {
            code_action_kinds: Some(vec![
                lsp::CodeActionKind::QUICKFIX,
                lsp::CodeActionKind::REFACTOR_EXTRACT,
                lsp::CodeActionKind::REFACTOR_INLINE,
                lsp::CodeActionKind::REFACTOR_REWRITE,
            ]),
            ..lsp::CodeActionOptions::default()
        })),
        signature_help_provider: Some(lsp::SignatureHelpOptions {
            trigger_characters: Some(vec!["(".to_string(), ",".to_string()]),
            ..lsp::SignatureHelpOptions::default()
        }),
        completion_provider: Some(lsp::CompletionOptions {
            trigger_characters: Some(vec![".".to_string()]),
            ..lsp::CompletionOptions::default()
        }),
        ..lsp::ServerCapabilities::default()
    }
}

/// Serves one client on `connection`: the handshake, then messages until `exit`.
pub(crate) fn serve(connection: &Connection, stdlib: StdlibFiles) -> Result<(), ServerError> {
    let mut server = Server {
        connection,
        stdlib,
        workspace: Workspace::default(),
        shutdown_requested: false,
        error_pages: None,
        snippets: false,
    };
    server.initialize()?;
    let mut queued: VecDeque<Message> = VecDeque::new();
    loop {
        let message = match queued.pop_front() {
            Some(message) => message,
            None => match connection.receiver.recv() {
                Ok(message) => message,
                Err(_) => break,
            },
        };
        queued.extend(connection.receiver.try_iter());
        match message {
            Message::Request(request) if outdated_request(&request, queued.iter()) => {
                let message = "the document changed after this request".to_string();
                server.send(error(request.id, ErrorCode::ContentModified, message).into())?;
            }
            Message::Request(request) => {
                let response = server.answer(request);
                server.send(response.into())?;
            }
            Message::Notification(notification) if notification.method == note::Exit::METHOD => {
                if server.shutdown_requested {
                    return Ok(());
                }
                return Err(ServerError::ExitWithoutShutdown);
            }
            Message::Notification(notification) => {
                let superseded = superseded_change(&notification, &queued);
                server.notice(notification, superseded)?
            }
            // The server sends no requests, so no response is awaited.
            Message::Response(_) => {}
        }
    }
    Err(ServerError::Disconnected)
}

struct Server<'c> {
    connection: &'c Connection,
    stdlib: StdlibFiles,
    workspace: Workspace,
    shutdown_requested: bool,
    /// Where diagnostic codes link to, chosen at `initialize` ([`error_pages_base`]).
    error_pages: Option<String>,
    /// Whether the client expands snippets in completions (it says so at `initialize`);
    /// a client that does not would insert `${1:name}` as it is.
    snippets: bool,
}

impl Server<'_> {
    /// The handshake: waits for `initialize` and answers it. Unlike `lsp-server`'s
    /// `initialize_start`/`initialize_finish`, which end the connection on anything
    /// unexpected, requests before it get `ServerNotInitialized` and other notifications
    /// are dropped; `initialized` is then taken by the loop like any notification.
    fn initialize(&mut self) -> Result<(), ServerError> {
        for message in &self.connection.receiver {
            match message {
                Message::Request(request) if request.method == req::Initialize::METHOD => {
                    self.error_pages = error_pages_base(&request.params);
                    self.workspace.roots = crate::workspace::roots(&request.params);
                    let support = &request.params["capabilities"]["textDocument"]["completion"]["completionItem"];
                    self.snippets = support["snippetSupport"].as_bool().unwrap_or(false);
                    let answer = lsp::InitializeResult {
                        capabilities: capabilities(),
                        server_info: Some(lsp::ServerInfo {
                            name: "ampc lsp".to_string(),
                            version: Some(env!("CARGO_PKG_VERSION").to_string()),
                        }),
                    };
                    return self.send(success(request.id, serde_json::to_value(answer)?).into());
                }
                Message::Request(request) => {
                    let message = format!("`{}` before `initialize`", request.method);
                    self.send(error(request.id, ErrorCode::ServerNotInitialized, message).into())?;
                }
                Message::Notification(notification) if notification.method == note::Exit::METHOD => {
                    return Err(ServerError::ExitWithoutShutdown);
                }
                Message::Notification(_) | Message::Response(_) => {}
            }
        }
        Err(ServerError::Disconnected)
    }

    fn send(&self, message: Message) -> Result<(), ServerError> {
        self.connection.sender.send(message).map_err(|_| ServerError::Disconnected)
    }

    fn answer(&mut self, request: Request) -> Response {
        let Request { id, method, params } = request;
        if self.shutdown_requested {
            return error(id, ErrorCode::InvalidRequest, "the server is shutting down".into());
        }
        if let Some(refusal) = self.outside_the_text(&method, &params) {
            eprintln!("ampc lsp: {refusal}");
            return error(id, ErrorCode::InvalidParams, refusal);
        }
        match method.as_str() {
            req::Shutdown::METHOD => {
                self.shutdown_requested = true;
                success(id, Value::Null)
            }
            req::HoverRequest::METHOD => self.handle::<req::HoverRequest>(id, params, |s, p| {
                let at = p.text_document_position_params;
                let document = s.workspace.get(&at.text_document.uri)?;
                handlers::hover(&document.analysis, at.position)
            }),
            req::SignatureHelpRequest::METHOD => self.handle::<req::SignatureHelpRequest>(id, params, |s, p| {
                let at = p.text_document_position_params;
                let document = s.workspace.get(&at.text_document.uri)?;
                handlers::signature_help(&document.analysis, at.position)
            }),
            req::GotoDefinition::METHOD => self.handle::<req::GotoDefinition>(id, params, |s, p| {
                let at = p.text_document_position_params;
                let document = s.workspace.get(&at.text_document.uri)?;
                handlers::definition(document, &s.stdlib, at.position).map(lsp::GotoDefinitionResponse::Scalar)
            }),
            req::DocumentSymbolRequest::METHOD => self.handle::<req::DocumentSymbolRequest>(id, params, |s, p| {
                let document = s.workspace.get(&p.text_document.uri)?;
                let symbols = handlers::document_symbols(&document.analysis);
                Some(lsp::DocumentSymbolResponse::Nested(symbols))
            }),
            req::Completion::METHOD => self.handle::<req::Completion>(id, params, |s, p| {
                let at = p.text_document_position;
                let document = s.workspace.get(&at.text_document.uri)?;
                let items = handlers::completion(&document.analysis, at.position, s.snippets);
                Some(lsp::CompletionResponse::Array(items))
            }),
            req::Formatting::METHOD => self.handle::<req::Formatting>(id, params, |s, p| {
                // The client's options (tab size, spaces) are not read: the layout is
                // canonical, four spaces, whatever the editor's settings.
                handlers::formatting(s.workspace.get(&p.text_document.uri)?)
            }),
            req::RangeFormatting::METHOD => self.handle::<req::RangeFormatting>(id, params, |s, p| {
                handlers::range_formatting(s.workspace.get(&p.text_document.uri)?, p.range)
            }),
            req::InlayHintRequest::METHOD => self.handle::<req::InlayHintRequest>(id, params, |s, p| {
                let document = s.workspace.get(&p.text_document.uri)?;
                Some(handlers::inlay_hints(&document.analysis, p.range))
            }),
            req::CodeActionRequest::METHOD => self.handle::<req::CodeActionRequest>(id, params, |s, p| {
                let document = s.workspace.get(&p.text_document.uri)?;
                // Quick fixes, then assists (`refactor.*`): a client that asks for some kinds
                // (`only`: a kind or a prefix of it) gets those.
                let wanted = |kind: &lsp::CodeActionKind| {
                    p.context
                        .only
                        .as_ref()
                        .is_none_or(|only| only.iter().any(|k| kind.as_str().starts_with(k.as_str())))
                };
                let mut actions = Vec::new();
                if wanted(&lsp::CodeActionKind::QUICKFIX) {
                    actions = handlers::code_actions(document, &s.stdlib, s.error_pages.as_deref(), p.range);
                }
                actions.extend(handlers::assists(document, p.range).into_iter().filter(|a| match a {
                    lsp::CodeActionOrCommand::CodeAction(a) => a.kind.as_ref().is_some_and(wanted),
                    lsp::CodeActionOrCommand::Command(_) => false,
                }));
                Some(actions)
            }),
            req::FoldingRangeRequest::METHOD => self.handle::<req::FoldingRangeRequest>(id, params, |s, p| {
                let document = s.workspace.get(&p.text_document.uri)?;
                Some(handlers::folding_ranges(document.analysis.main_file()?))
            }),
            req::DocumentHighlightRequest::METHOD => {
                self.handle::<req::DocumentHighlightRequest>(id, params, |s, p| {
                    let at = p.text_document_position_params;
                    let document = s.workspace.get(&at.text_document.uri)?;
                    Some(handlers::document_highlight(&document.analysis, at.position))
                })
            }
            req::References::METHOD => self.handle::<req::References>(id, params, |s, p| {
                let at = p.text_document_position;
                let document = s.workspace.get(&at.text_document.uri)?;
                let declaration = p.context.include_declaration;
                let uri_of = |name: &str| s.workspace.uri_of_name(name, &s.stdlib);
                s.workspace.with_project(&document.uri, |project| {
                    handlers::references(document, project, &uri_of, at.position, declaration)
                })?
            }),
            req::WorkspaceSymbolRequest::METHOD => self.handle::<req::WorkspaceSymbolRequest>(id, params, |s, p| {
                let uri_of = |name: &str| s.workspace.uri_of_name(name, &s.stdlib);
                let symbols = s.workspace.with_everything(|all| handlers::workspace_symbols(all, &uri_of, &p.query));
                Some(lsp::WorkspaceSymbolResponse::Flat(symbols))
            }),
            req::PrepareRenameRequest::METHOD => {
                self.handle_fallible::<req::PrepareRenameRequest>(id, params, |s, p| {
                    let document = s.workspace.get(&p.text_document.uri).ok_or(NOT_OPEN)?;
                    handlers::prepare_rename(&document.analysis, p.position).map(Some)
                })
            }
            req::Rename::METHOD => self.handle_fallible::<req::Rename>(id, params, |s, p| {
                let at = p.text_document_position;
                let document = s.workspace.get(&at.text_document.uri).ok_or(NOT_OPEN)?;
                let uri_of = |name: &str| s.workspace.uri_of_name(name, &s.stdlib);
                let rename = |project: &[&crate::documents::Analysis]| {
                    handlers::rename(document, project, &uri_of, at.position, &p.new_name)
                };
                s.workspace.with_project(&document.uri, rename).ok_or(NOT_OPEN)?.map(Some)
            }),
            req::SemanticTokensFullRequest::METHOD => {
                self.handle::<req::SemanticTokensFullRequest>(id, params, |s, p| {
                    let document = s.workspace.get(&p.text_document.uri)?;
                    Some(lsp::SemanticTokensResult::Tokens(handlers::semantic_tokens(&document.analysis)))
                })
            }
            _ => error(id, ErrorCode::MethodNotFound, format!("unsupported request `{method}`")),
        }
    }

    /// Why a request's position (`position`, or `range`'s ends) in an open document lies
    /// outside its text, if it does: the editor's text and the server's differ, and an
    /// answer at a clamped position would be about something else.
    fn outside_the_text(&self, method: &str, params: &Value) -> Option<String> {
        let uri: lsp::Uri = params["textDocument"]["uri"].as_str()?.parse().ok()?;
        let file = self.workspace.get(&uri)?.analysis.main_file()?;
        let range = &params["range"];
        let positions = [&params["position"], &range["start"], &range["end"]];
        for value in positions.into_iter().filter(|v| !v.is_null()) {
            let position: lsp::Position = serde_json::from_value(value.clone()).ok()?;
            if crate::convert::checked_offset(file, position).is_none() {
                return Some(format!(
                    "`{method}`: position {}:{} is outside {} ({} lines)",
                    position.line,
                    position.character,
                    uri.as_str(),
                    file.lines.line_count()
                ));
            }
        }
        None
    }

    /// Deserializes the parameters of `R`, runs `handler` and serializes its answer; bad
    /// parameters get an `InvalidParams` error rather than a panic.
    fn handle<R: lsp::request::Request>(
        &self,
        id: RequestId,
        params: Value,
        handler: impl FnOnce(&Self, R::Params) -> R::Result,
    ) -> Response {
        self.handle_fallible::<R>(id, params, |s, p| Ok(handler(s, p)))
    }

    /// As [`Server::handle`], for a handler that can refuse: its message is answered as a
    /// `RequestFailed` error, which editors show to the user.
    fn handle_fallible<R: lsp::request::Request>(
        &self,
        id: RequestId,
        params: Value,
        handler: impl FnOnce(&Self, R::Params) -> Result<R::Result, String>,
    ) -> Response {
        let params = match serde_json::from_value::<R::Params>(params) {
            Ok(params) => params,
            Err(e) => {
                let message = format!("invalid parameters for `{}`: {e}", R::METHOD);
                return error(id, ErrorCode::InvalidParams, message);
            }
        };
        match handler(self, params).map(serde_json::to_value) {
            Ok(Ok(result)) => success(id, result),
            Ok(Err(e)) => error(id, ErrorCode::InternalError, e.to_string()),
            Err(refusal) => error(id, ErrorCode::RequestFailed, refusal),
        }
    }

    /// Handles a notification. Malformed ones are logged and dropped: a notification has
    /// no response to carry an error.
    /// A `superseded` change only updates the text (see the module's documentation).
    fn notice(&mut self, notification: Notification, superseded: bool) -> Result<(), ServerError> {
        let Notification { method, params } = notification;
        let uri = match method.as_str() {
            note::DidOpenTextDocument::METHOD => {
                let Some(p) = parse::<note::DidOpenTextDocument>(params) else {
                    return Ok(());
                };
                let doc = p.text_document;
                self.workspace.open(doc.uri.clone(), doc.version, doc.text);
                doc.uri
            }
            note::DidChangeTextDocument::METHOD => {
                let Some(p) = parse::<note::DidChangeTextDocument>(params) else {
                    return Ok(());
                };
                let uri = p.text_document.uri;
                let Some(applied) = self.workspace.change(&uri, p.text_document.version, p.content_changes, superseded)
                else {
                    eprintln!("ampc lsp: change to a document that is not open: {}", uri.as_str());
                    return Ok(());
                };
                if let Err(why) = applied {
                    // No reply carries it: the log says the texts now differ.
                    eprintln!(
                        "ampc lsp: a change to {} was refused: {why}; the editor's text and the server's differ \
                         until the document is reopened",
                        uri.as_str()
                    );
                }
                if superseded {
                    return Ok(());
                }
                uri
            }
            note::DidSaveTextDocument::METHOD => {
                let Some(p) = parse::<note::DidSaveTextDocument>(params) else {
                    return Ok(());
                };
                if !self.workspace.save(&p.text_document.uri, p.text) {
                    return Ok(());
                }
                p.text_document.uri
            }
            note::DidCloseTextDocument::METHOD => {
                let Some(p) = parse::<note::DidCloseTextDocument>(params) else {
                    return Ok(());
                };
                // A closed document's diagnostics go away with it; its importers read the disk.
                self.workspace.close(&p.text_document.uri);
                self.publish(p.text_document.uri.clone(), Vec::new(), None)?;
                let importers = self.workspace.recheck_importers(&p.text_document.uri);
                return self.publish_all(importers);
            }
            // `initialized`, `$/cancelRequest` and the rest need nothing: every request is
            // answered before the next message is read.
            _ => return Ok(()),
        };
        let importers = self.workspace.recheck_importers(&uri);
        self.publish_all(std::iter::once(uri).chain(importers).collect())
    }

    /// Publishes the diagnostics of each open document of `uris`.
    fn publish_all(&self, uris: Vec<lsp::Uri>) -> Result<(), ServerError> {
        for uri in uris {
            if let Some(document) = self.workspace.get(&uri) {
                let diagnostics = document.diagnostics(&self.stdlib, self.error_pages.as_deref());
                self.publish(uri, diagnostics, Some(document.version))?;
            }
        }
        Ok(())
    }

    /// Publishes the full list of `uri`'s diagnostics; an empty list clears them.
    fn publish(
        &self,
        uri: lsp::Uri,
        diagnostics: Vec<lsp::Diagnostic>,
        version: Option<i32>,
    ) -> Result<(), ServerError> {
        let params = lsp::PublishDiagnosticsParams { uri, diagnostics, version };
        let notification = Notification {
            method: note::PublishDiagnostics::METHOD.to_string(),
            params: serde_json::to_value(params)?,
        };
        self.send(notification.into())
    }
}

/// The document a message is about (`textDocument.uri`), if it names one.
fn document_of(params: &Value) -> Option<&str> {
    params["textDocument"]["uri"].as_str()
}

/// Whether a `didChange` of `uri` is among `later`.
fn changed_later<'m>(uri: &str, later: impl Iterator<Item = &'m Message>) -> bool {
    later.into_iter().any(|m| {
        matches!(m, Message::Notification(n) if n.method == note::DidChangeTextDocument::METHOD
            && document_of(&n.params) == Some(uri))
    })
}

/// Whether `request` is about a document that a `didChange` among `later` changes again:
/// it is answered `ContentModified` without waiting for an analysis.
fn outdated_request<'m>(request: &Request, later: impl Iterator<Item = &'m Message>) -> bool {
    document_of(&request.params).is_some_and(|uri| changed_later(uri, later))
}

/// Whether `notification` is a `didChange` that a later `didChange` of the same document
/// in `queued` replaces before any request, save or close of it could see its analysis
/// (a request about it that is itself outdated sees none).
fn superseded_change(notification: &Notification, queued: &VecDeque<Message>) -> bool {
    if notification.method != note::DidChangeTextDocument::METHOD {
        return false;
    }
    let Some(uri) = document_of(&notification.params) else {
        return false;
    };
    for (i, message) in queued.iter().enumerate() {
        match message {
            Message::Request(r) if document_of(&r.params).is_some_and(|u| u != uri) => {}
            Message::Request(r) if outdated_request(r, queued.iter().skip(i + 1)) => {}
            Message::Request(_) => return false,
            Message::Notification(n) if document_of(&n.params) == Some(uri) => {
                return n.method == note::DidChangeTextDocument::METHOD;
            }
            Message::Notification(n) if n.method == note::Exit::METHOD => return false,
            _ => {}
        }
    }
    false
}

fn parse<N: lsp::notification::Notification>(params: Value) -> Option<N::Params> {
    match serde_json::from_value(params) {
        Ok(params) => Some(params),
        Err(e) => {
            eprintln!("ampc lsp: ignoring `{}` with invalid parameters: {e}", N::METHOD);
            None
        }
    }
}

/// The refusal for a request about a document the client has not opened.
const NOT_OPEN: &str = "the document is not open";

fn success(id: RequestId, result: Value) -> Response {
    Response { id, response_result: Ok(result) }
}

fn error(id: RequestId, code: ErrorCode, message: String) -> Response {
    Response { id, response_result: Err(lsp_server::ResponseError { code: code as i32, message, data: None }) }
}

#[cfg(test)]
mod tests;
