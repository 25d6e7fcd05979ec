/**
 * Stand-ins for the network beyond the egress proxy: a network namespace joined to the
 * host by a veth pair (10.231.N.1 on the host, 10.231.N.2 inside) where the stand-in
 * servers run (egress-standins-main.ts), and a DNS server on the host's loopback that the
 * proxy is pointed at (SANDGATE_EGRESS_DNS), answering the test's names:
 *
 *   pkgs.test, api.test, other.test   the namespace's address (a private one the settings list)
 *   loop.test                         127.0.0.1
 *   gw.test                           the host's end of the pair: an address of the gateway's own
 *   private.test                      10.99.0.1, a private address nobody listed
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import dnsPacket from 'dns-packet';
import { makeCertificates } from './tls.js';

export interface NetworkStandins {
  dir: string;
  /** The namespace's address, and the host's end of the pair. */
  outside: string;
  hostSide: string;
  subnet: string;
  dns: string;
  caFile: string;
  /** The gateway's settings that point its egress proxy here: its DNS, the namespace's network, the stand-in registries. */
  settings: Record<string, string>;
  /** Every request the stand-ins saw, with its headers. */
  requests(): {
    port: number;
    method: string;
    url: string;
    headers: Record<string, string>;
  }[];
  close(): Promise<void>;
}

function ip(args: string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

/** A wheel of package `sgdemo` (sgdemo.VALUE == 42), built with Python's zipfile. */
function buildWheel(dir: string): void {
  const script = `
import sys, zipfile
files = {
  'sgdemo/__init__.py': 'VALUE = 42\\n',
  'sgdemo-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: sgdemo\\nVersion: 1.0\\n',
  'sgdemo-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: sandgate-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n',
}
files['sgdemo-1.0.dist-info/RECORD'] = ''.join('%s,,\\n' % n for n in list(files) + ['sgdemo-1.0.dist-info/RECORD'])
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for n, t in files.items():
        z.writestr(n, t)
`;
  const r = spawnSync('python3', ['-c', script, path.join(dir, 'sgdemo-1.0-py3-none-any.whl')], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`building the wheel failed: ${r.stderr}`);
  // An npm package: package/index.js exporting pad().
  const pkg = path.join(dir, 'npm-src', 'package');
  fs.mkdirSync(pkg, { recursive: true });
  fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'sg-pad', version: '1.0.0', main: 'index.js' }));
  fs.writeFileSync(path.join(pkg, 'index.js'), "module.exports = { pad: (s, n) => String(s).padStart(n, '*') };\n");
  const t = spawnSync('tar', ['-czf', path.join(dir, 'sg-pad-1.0.0.tgz'), '-C', path.join(dir, 'npm-src'), 'package']);
  if (t.status !== 0) throw new Error('building the npm tarball failed');
}

export async function startNetworkStandins(): Promise<NetworkStandins> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-egress-'));
  const n = 10 + (process.pid % 200);
  const ns = `sgeg${process.pid}`;
  const hostIf = `sgh${process.pid}`.slice(0, 15);
  const nsIf = `sgn${process.pid}`.slice(0, 15);
  const hostSide = `10.231.${n}.1`;
  const outside = `10.231.${n}.2`;
  spawnSync('ip', ['netns', 'del', ns]);
  ip(['netns', 'add', ns]);
  ip(['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf]);
  ip(['link', 'set', nsIf, 'netns', ns]);
  ip(['addr', 'add', `${hostSide}/24`, 'dev', hostIf]);
  ip(['link', 'set', hostIf, 'up']);
  ip(['netns', 'exec', ns, 'ip', 'addr', 'add', `${outside}/24`, 'dev', nsIf]);
  ip(['netns', 'exec', ns, 'ip', 'link', 'set', nsIf, 'up']);
  ip(['netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);

  // The API's certificate, for api.test, from a throw-away CA.
  const certs = makeCertificates(dir, 'DNS:api.test');
  fs.writeFileSync(path.join(dir, 'ca.crt'), certs.ca);
  fs.writeFileSync(path.join(dir, 'api.key'), certs.key);
  fs.writeFileSync(path.join(dir, 'api.crt'), certs.cert);
  buildWheel(dir);
  const secret = `sk-test-${Math.random().toString(36).slice(2)}${Date.now()}`;
  fs.writeFileSync(path.join(dir, 'secret'), secret);

  const child: ChildProcess = spawn('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', path.resolve('test/support/egress-standins-main.ts'), dir, secret], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let errors = '';
  child.stderr!.on('data', (d: Buffer) => (errors += d.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve());
    child.on('exit', (code) => reject(new Error(`the stand-ins exited (${code}): ${errors}`)));
  });

  const names: Record<string, string> = {
    'pkgs.test': outside,
    'api.test': outside,
    'other.test': outside,
    'loop.test': '127.0.0.1',
    'gw.test': hostSide,
    'private.test': '10.99.0.1',
  };
  const dns = dgram.createSocket('udp4');
  dns.on('message', (msg, rinfo) => {
    let q: dnsPacket.Packet;
    try {
      q = dnsPacket.decode(msg);
    } catch {
      return;
    }
    const question = q.questions?.[0];
    if (!question) return;
    const address = names[question.name.toLowerCase()];
    const answers = question.type === 'A' && address ? [{ type: 'A' as const, name: question.name, ttl: 1, data: address }] : [];
    const reply = dnsPacket.encode({
      id: q.id,
      type: 'response',
      flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE,
      questions: q.questions,
      answers,
      ...(address || question.type !== 'A' ? {} : { rcode: 'NXDOMAIN' }),
    } as dnsPacket.Packet);
    dns.send(reply, rinfo.port, rinfo.address);
  });
  await new Promise<void>((resolve) => dns.bind(0, '127.0.0.1', resolve));

  return {
    dir,
    outside,
    hostSide,
    subnet: `10.231.${n}.0/24`,
    dns: `127.0.0.1:${dns.address().port}`,
    caFile: path.join(dir, 'ca.crt'),
    settings: {
      SANDGATE_EGRESS_DNS: `127.0.0.1:${dns.address().port}`,
      SANDGATE_EGRESS_PRIVATE_NETS: `10.231.${n}.0/24`,
      SANDGATE_EGRESS_PIP_INDEX: 'http://pkgs.test:8080/simple/',
      SANDGATE_EGRESS_PIP_FILES: '',
      SANDGATE_EGRESS_NPM_REGISTRY: 'http://pkgs.test:8080/npm/',
      SANDGATE_EGRESS_CA_FILE: path.join(dir, 'ca.crt'),
    },
    requests() {
      const f = path.join(dir, 'requests.jsonl');
      return fs.existsSync(f)
        ? fs
            .readFileSync(f, 'utf8')
            .trim()
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l))
        : [];
    },
    async close() {
      dns.close();
      child.kill('SIGKILL');
      spawnSync('ip', ['link', 'del', hostIf]);
      spawnSync('ip', ['netns', 'del', ns]);
      // The stand-in's node runs under `ip netns exec`: ended with the namespace's processes.
      spawnSync('ip', ['netns', 'pids', ns]);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
