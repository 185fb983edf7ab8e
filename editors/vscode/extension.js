// The Amp extension: starts `ampc lsp` over stdio and hands it every `.amp` document.
// Everything else (diagnostics, hover, definitions, symbols, completion, formatting) is
// the server's; the extension only tells it where the error pages are.
'use strict';

const fs = require('fs');
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

/**
 * Where diagnostic codes link to (`<base>/<CODE>.md`), passed to the server as
 * `initializationOptions.docsBaseUrl`: `amp.docs.baseUrl` if set; else the workspace's
 * own `docs/errors` when it is an Amp checkout; else the pages packed into the extension
 * (scripts/bundle-docs.js); else nothing, and the server links nowhere.
 * @param {vscode.ExtensionContext} context
 */
function docsBaseUrl(context) {
  const configured = (vscode.workspace.getConfiguration('amp').get('docs.baseUrl') || '').trim();
  if (configured) {
    return configured;
  }
  const folders = vscode.workspace.workspaceFolders || [];
  const candidates = folders
    .filter((folder) => folder.uri.scheme === 'file')
    .map((folder) => path.join(folder.uri.fsPath, 'docs', 'errors'));
  candidates.push(context.asAbsolutePath(path.join('docs', 'errors')));
  const found = candidates.find((dir) => fs.existsSync(path.join(dir, 'README.md')));
  return found ? vscode.Uri.file(found).toString() : undefined;
}

/** @param {vscode.ExtensionContext} context */
async function startClient(context) {
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
      initializationOptions: { docsBaseUrl: docsBaseUrl(context) },
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

/** @param {vscode.ExtensionContext} context */
async function restartClient(context) {
  await stopClient();
  await startClient(context);
}

/** @param {vscode.ExtensionContext} context */
async function activate(context) {
  context.subscriptions.push(
    vscode.commands.registerCommand('amp.restartServer', () => restartClient(context)),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration('amp.server.path') || event.affectsConfiguration('amp.docs.baseUrl')) {
        restartClient(context);
      }
    }),
  );
  await startClient(context);
}

function deactivate() {
  return stopClient();
}

module.exports = { activate, deactivate };
