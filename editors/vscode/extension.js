// The Amp extension: starts `ampc lsp` over stdio and hands it every `.amp` document.
// Everything else (diagnostics, hover, definitions, symbols, completion) is the server's.
'use strict';

const path = require('path');
const vscode = require('vscode');
const { LanguageClient } = require('vscode-languageclient/node');

/** @type {LanguageClient | undefined} */
let client;

/** The `ampc` to run: `amp.server.path`, relative paths taken from the first workspace folder. */
function serverCommand() {
  const configured = vscode.workspace.getConfiguration('amp').get('server.path') || 'ampc';
  const folders = vscode.workspace.workspaceFolders;
  const isBareName = !configured.includes('/') && !configured.includes('\\');
  if (isBareName || path.isAbsolute(configured) || !folders || folders.length === 0) {
    return configured;
  }
  return path.join(folders[0].uri.fsPath, configured);
}

async function startClient() {
  const command = serverCommand();
  const executable = { command, args: ['lsp'] };
  client = new LanguageClient(
    'amp',
    'Amp Language Server',
    { run: executable, debug: executable },
    {
      documentSelector: [
        { scheme: 'file', language: 'amp' },
        { scheme: 'untitled', language: 'amp' },
      ],
    },
  );
  try {
    await client.start();
  } catch (error) {
    client = undefined;
    const reason = error instanceof Error ? error.message : String(error);
    vscode.window.showErrorMessage(
      `Amp: cannot start \`${command} lsp\` (${reason}). ` +
        'Build ampc (`cargo build --release -p ampc`) and set "amp.server.path" to it.',
    );
  }
}

async function stopClient() {
  if (client) {
    const running = client;
    client = undefined;
    await running.stop();
  }
}

async function restartClient() {
  await stopClient();
  await startClient();
}

/** @param {vscode.ExtensionContext} context */
async function activate(context) {
  context.subscriptions.push(
    vscode.commands.registerCommand('amp.restartServer', restartClient),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration('amp.server.path')) {
        restartClient();
      }
    }),
  );
  await startClient();
}

function deactivate() {
  return stopClient();
}

module.exports = { activate, deactivate };
