/** TLS for local stand-ins: a throw-away CA, and a certificate it signed for 127.0.0.1 and localhost. */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** A CA and a server certificate it signed (for 127.0.0.1 and localhost unless `names` says otherwise), made with openssl. */
export function makeCertificates(root: string, names = 'IP:127.0.0.1,DNS:localhost'): { ca: Buffer; key: Buffer; cert: Buffer } {
  const dir = fs.mkdtempSync(path.join(root, 'tls-'));
  const f = (n: string) => path.join(dir, n);
  const run = (args: string[]) => {
    const r = spawnSync('openssl', args, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`openssl ${args[0]} failed: ${r.stderr}`);
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run(['req', '-x509', ...ec, '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '2', '-subj', '/CN=stand-in cluster CA']);
  run(['req', ...ec, '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=kube-apiserver']);
  fs.writeFileSync(f('ext'), `subjectAltName=${names}\n`);
  run(['x509', '-req', '-in', f('server.csr'), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f('server.crt'), '-days', '2', '-extfile', f('ext')]);
  return { ca: fs.readFileSync(f('ca.crt')), key: fs.readFileSync(f('server.key')), cert: fs.readFileSync(f('server.crt')) };
}

