// Copies the error pages (../../docs/errors/*.md) into the extension, so that a packaged
// extension can link each diagnostic code to its page when no `amp.docs.baseUrl` is set
// and the workspace is not an Amp checkout. Run by `vscode:prepublish` (vsce package).
'use strict';

const fs = require('fs');
const path = require('path');

const source = path.join(__dirname, '..', '..', '..', 'docs', 'errors');
const target = path.join(__dirname, '..', 'docs', 'errors');

if (!fs.existsSync(path.join(source, 'README.md'))) {
  console.error(`bundle-docs: no error pages at ${source}; package from an Amp checkout`);
  process.exit(1);
}
fs.rmSync(target, { recursive: true, force: true });
fs.mkdirSync(target, { recursive: true });
const pages = fs.readdirSync(source).filter((name) => name.endsWith('.md'));
for (const page of pages) {
  fs.copyFileSync(path.join(source, page), path.join(target, page));
}
console.log(`bundle-docs: ${pages.length} pages copied to ${target}`);
