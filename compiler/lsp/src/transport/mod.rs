//! The transport: bytes on stdin become messages for the server loop, its messages become
//! bytes on stdout.
//!
//! `lsp-server`'s own stdio transport ends the connection on the first message it cannot
//! read (invalid JSON, a bad header, invalid UTF-8) and allocates whatever a
//! `Content-Length` claims. This one frames messages itself ([`framing`]), decodes each
//! body ([`decode`]), answers what it cannot decode with a JSON-RPC error where an id can
//! be recovered (else logs a line and drops it), and goes on: only the end of stdin or
//! the `exit` notification ends it. What decodes is handed on as `lsp-server`'s
//! [`Message`], so the server loop and `Connection` stay as they were.
//!
//! [`pump`] is the whole reading side as a function of a [`BufRead`], so that tests and
//! the fuzz target drive it without processes; [`serve_bytes`] runs it and the server
//! loop over a byte slice.

mod decode;
mod framing;

pub use framing::MAX_CONTENT_LENGTH;

use crate::server::{serve, ServerError};
use crate::stdlib_files::StdlibFiles;
use crossbeam_channel::{Receiver, Sender};
use decode::decode;
use framing::{Frame, FrameReader};
use lsp_server::{Connection, Message};
use std::io::{self, BufRead};
use std::thread::{self, JoinHandle};

/// Reads messages from `input` until its end or `exit`, handing each to `to_server` and
/// answering those it rejects on `to_client`; every dropped or rejected message is told
/// to `log` in one line. Stops early, without error, when the server stops listening.
pub(crate) fn pump(
    input: impl BufRead,
    to_server: &Sender<Message>,
    to_client: &Sender<Message>,
    log: &mut dyn FnMut(&str),
) -> io::Result<()> {
    let mut frames = FrameReader::new(input);
    while let Some(frame) = frames.next_frame()? {
        let body = match frame {
            Frame::Body(body) => body,
            Frame::Refused(refusal) => {
                log(&format!("ampc lsp: dropped a message: {refusal}"));
                continue;
            }
        };
        match decode(&body) {
            Ok(message) => {
                let is_exit = matches!(&message, Message::Notification(n) if n.method == "exit");
                if to_server.send(message).is_err() || is_exit {
                    return Ok(());
                }
            }
            Err(rejection) => match rejection.response() {
                Some(response) => {
                    log(&format!("ampc lsp: answered a malformed message with an error: {}", rejection.message));
                    // A writer that has stopped can take no answer; the server loop will
                    // notice the same and end.
                    let _ = to_client.send(response.into());
                }
                None => log(&format!("ampc lsp: dropped a message: {}", rejection.message)),
            },
        }
    }
    Ok(())
}

/// The threads behind a stdio [`Connection`].
pub(crate) struct IoThreads {
    reader: JoinHandle<io::Result<()>>,
    writer: JoinHandle<io::Result<()>>,
}

impl IoThreads {
    /// Waits for both threads: call after the connection is dropped and the reader has
    /// stopped (at `exit` or the end of stdin), so that the writer drains and ends.
    pub(crate) fn join(self) -> io::Result<()> {
        let reader = self.reader.join().unwrap_or_else(|_| Err(io::Error::other("the reader thread panicked")));
        let writer = self.writer.join().unwrap_or_else(|_| Err(io::Error::other("the writer thread panicked")));
        reader.and(writer)
    }
}

/// A connection over stdin and stdout, through [`pump`] and a writer thread.
pub(crate) fn stdio() -> io::Result<(Connection, IoThreads)> {
    // Rendezvous channels, as in `lsp-server`: the reader reads no further ahead than
    // the server has taken, so a fast client cannot queue unbounded memory.
    let (to_client, outgoing) = crossbeam_channel::bounded::<Message>(0);
    let (to_server, incoming) = crossbeam_channel::bounded::<Message>(0);
    let writer = thread::Builder::new().name("ampc-lsp-writer".into()).spawn(move || write_all(&outgoing))?;
    let answers = to_client.clone();
    let reader = thread::Builder::new()
        .name("ampc-lsp-reader".into())
        .spawn(move || pump(io::stdin().lock(), &to_server, &answers, &mut |line| eprintln!("{line}")))?;
    Ok((Connection { sender: to_client, receiver: incoming }, IoThreads { reader, writer }))
}

/// Writes each message to stdout until every sender is gone. After a write error it keeps
/// taking messages and drops them: senders never see a closed channel (`lsp-server`'s
/// handshake unwraps its sends), and the loop ends with stdin as usual.
fn write_all(outgoing: &Receiver<Message>) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    let mut failure = None;
    for message in outgoing {
        if failure.is_none() {
            if let Err(e) = message.write(&mut stdout) {
                eprintln!("ampc lsp: cannot write to stdout: {e}");
                failure = Some(e);
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

/// Runs the whole server over `input` as if it came on stdin: framing, decoding, the
/// handshake and every handler, with no standard library files and no threads. Returns
/// how the loop ended and every message written, the transport's error answers first.
/// For the fuzz target and tests.
pub fn serve_bytes(input: &[u8]) -> (Result<(), ServerError>, Vec<Message>) {
    let (to_server, incoming) = crossbeam_channel::unbounded();
    let (to_client, outgoing) = crossbeam_channel::unbounded();
    // A slice cannot fail to read, and nothing is logged: a fuzzer runs this millions
    // of times.
    let _ = pump(input, &to_server, &to_client, &mut |_| {});
    drop(to_server);
    let connection = Connection { sender: to_client, receiver: incoming };
    let outcome = serve(&connection, StdlibFiles::none());
    drop(connection);
    (outcome, outgoing.try_iter().collect())
}
