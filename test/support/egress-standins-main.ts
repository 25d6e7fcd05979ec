/**
 * The outside world of the egress tests, run in a network namespace of its own (a host
 * other than the gateway's): a PEP 503 package index and an npm-registry-shaped server on
 * :8080, and an HTTPS API with the test CA's certificate on :8443. Every request's
 * headers are appended to <dir>/requests.jsonl, for the test to check what arrived where.
 *
 *   node --import tsx test/support/egress-standins-main.ts <dir> <secret>
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';

const [dir, secret] = process.argv.slice(2) as [string, string];
const wheelName = 'sgdemo-1.0-py3-none-any.whl';
const wheel = fs.readFileSync(path.join(dir, wheelName));
const wheelSha = crypto.createHash('sha256').update(wheel).digest('hex');
const tarball = fs.readFileSync(path.join(dir, 'sg-pad-1.0.0.tgz'));
const tarballSha1 = crypto.createHash('sha1').update(tarball).digest('hex');
const tarballIntegrity = `sha512-${crypto.createHash('sha512').update(tarball).digest('base64')}`;

function log(port: number, req: http.IncomingMessage) {
  fs.appendFileSync(path.join(dir, 'requests.jsonl'), `${JSON.stringify({ port, method: req.method, url: req.url, headers: req.headers })}\n`);
}

const plain = http.createServer((req, res) => {
  log(8080, req);
  const url = new URL(req.url ?? '/', 'http://x');
  const host = req.headers.host ?? '';
  if (url.pathname === '/simple/') return void res.writeHead(200, { 'content-type': 'text/html' }).end('<!DOCTYPE html><html><body><a href="/simple/sgdemo/">sgdemo</a></body></html>');
  if (url.pathname === '/simple/sgdemo/') {
    return void res.writeHead(200, { 'content-type': 'text/html' }).end(`<!DOCTYPE html><html><body><a href="/files/${wheelName}#sha256=${wheelSha}">${wheelName}</a></body></html>`);
  }
  if (url.pathname === `/files/${wheelName}`)
    return void res
      .writeHead(200, {
        'content-type': 'application/octet-stream',
        'content-length': wheel.length,
      })
      .end(wheel);
  if (url.pathname === '/npm/sg-pad') {
    const tarballUrl = `http://${host}/npm/sg-pad/-/sg-pad-1.0.0.tgz`;
    return void res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        name: 'sg-pad',
        'dist-tags': { latest: '1.0.0' },
        versions: {
          '1.0.0': {
            name: 'sg-pad',
            version: '1.0.0',
            main: 'index.js',
            dist: {
              tarball: tarballUrl,
              shasum: tarballSha1,
              integrity: tarballIntegrity,
            },
          },
        },
      }),
    );
  }
  if (url.pathname === '/npm/sg-pad/-/sg-pad-1.0.0.tgz') return void res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(tarball);
  if (url.pathname === '/big') {
    // A download as large as asked (for the flood and the bench).
    const n = Math.min(Number(url.searchParams.get('bytes') ?? 1024), 64 * 1024 * 1024);
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': n,
    });
    return void res.end(Buffer.alloc(n, 120));
  }
  res.writeHead(200, { 'content-type': 'text/plain' }).end(`hello from ${host}${url.pathname}\n`);
});

const secure = https.createServer(
  {
    key: fs.readFileSync(path.join(dir, 'api.key')),
    cert: fs.readFileSync(path.join(dir, 'api.crt')),
  },
  (req, res) => {
    log(8443, req);
    // Says whether the credential came, never what it is.
    const authorized = req.headers.authorization === `Bearer ${secret}`;
    res.writeHead(authorized ? 200 : 401, { 'content-type': 'application/json' }).end(JSON.stringify({ authorized, path: req.url }));
  },
);

plain.listen(8080, '0.0.0.0', () => secure.listen(8443, '0.0.0.0', () => process.stdout.write('ready\n')));
