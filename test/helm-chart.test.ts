/**
 * The Helm chart (deploy/helm/sandgate), rendered with Helm's template engine
 * (test/support/helm.ts) for its defaults, each example, and every option on; every
 * object it renders validated against the Kubernetes OpenAPI schema (kubernetes-models)
 * and checked for fields the API does not have (as `--validate=strict` would: a field
 * the official client's models do not know is one the API server would drop).
 */
import fs from 'node:fs';
import path from 'node:path';
import { ObjectSerializer } from '@kubernetes/client-node/dist/serializer.js';
import { describe, expect, it } from 'vitest';
import { SETTINGS } from '../src/config.js';
import { NEEDED_PERMISSIONS } from '../src/sandboxes/kubernetes/health.js';
import { networkPolicyManifest } from '../src/sandboxes/kubernetes/objects.js';
import { CHART_DIR, renderChart } from './support/helm.js';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const REQUIRED = { publicUrl: 'https://sandgate.example.com', 'database.url': 'postgres://sandgate:pw@db:5432/sandgate' };
const EXAMPLES = fs.readdirSync(path.join(CHART_DIR, 'examples')).map((f) => path.join(CHART_DIR, 'examples', f));
const EVERYTHING = { ...REQUIRED, 'postgresql.enabled': 'true', 'runtimeClass.create': 'true', 'ingress.enabled': 'true', 'ingress.tlsSecretName': 'tls', 'github.clientId': 'Iv1.x', 'github.clientSecret': 's', 'networkPolicy.gateway': 'true', 'env.SANDGATE_LOG_LEVEL': 'debug' };

/** The model class of an object's apiVersion and kind, from kubernetes-models. */
async function modelOf(o: Obj): Promise<new (data: unknown) => { validate(): void }> {
  const [group, version] = String(o.apiVersion).includes('/') ? String(o.apiVersion).split('/') : ['', String(o.apiVersion)];
  const mod = (await import(`kubernetes-models/${group ? `${group}/` : ''}${version}/${o.kind}`)) as Record<string, new (data: unknown) => { validate(): void }>;
  return mod[o.kind as string]!;
}

/** Paths of `o` the official client's model of its kind does not have. */
function unknownFields(o: Obj): string[] {
  const version = String(o.apiVersion).split('/').pop()!;
  const type = `${version[0]!.toUpperCase()}${version.slice(1)}${o.kind}`;
  const back = ObjectSerializer.serialize(ObjectSerializer.deserialize(o, type), type) as Obj;
  const missing: string[] = [];
  const walk = (a: unknown, b: unknown, at: string) => {
    if (a && typeof a === 'object') {
      for (const [k, v] of Object.entries(a)) {
        const there = b && typeof b === 'object' ? (b as Obj)[k] : undefined;
        if (there === undefined && v !== undefined && v !== null) missing.push(`${at}.${k}`);
        else walk(v, there, `${at}.${k}`);
      }
    }
  };
  walk(o, back, `${o.kind}`);
  return missing;
}

async function checkAll(objects: Obj[]): Promise<void> {
  expect(objects.length).toBeGreaterThan(5);
  for (const o of objects) {
    const name = `${o.kind}/${o.metadata?.name}`;
    const Model = await modelOf(o);
    expect(() => new Model(o).validate(), name).not.toThrow();
    expect(unknownFields(o), name).toEqual([]);
  }
}

const find = (objects: Obj[], kind: string, suffix = '') => objects.find((o) => o.kind === kind && String(o.metadata.name).endsWith(suffix))!;

describe('the Helm chart', () => {
  it('renders with the required values, and every object is valid against the Kubernetes schema', async () => {
    const r = renderChart({ set: REQUIRED });
    expect(r.stderr).toBe('');
    expect(r.ok).toBe(true);
    await checkAll(r.objects);
  });

  it('renders every example and every option, all valid', async () => {
    expect(EXAMPLES.length).toBeGreaterThanOrEqual(2);
    for (const example of EXAMPLES) {
      const r = renderChart({ values: [example], set: { 'database.existingSecret': '' , 'database.url': 'postgres://u:p@db/sandgate', 'github.clientSecret': 's' } });
      expect(r.ok, `${example}: ${r.stderr}`).toBe(true);
      await checkAll(r.objects);
    }
    const all = renderChart({ set: EVERYTHING });
    expect(all.ok, all.stderr).toBe(true);
    await checkAll(all.objects);
    for (const kind of ['Deployment', 'Service', 'Ingress', 'PodDisruptionBudget', 'RuntimeClass', 'Namespace', 'Role', 'RoleBinding', 'NetworkPolicy', 'StatefulSet', 'Secret', 'ServiceAccount']) {
      expect(all.objects.map((o) => o.kind), kind).toContain(kind);
    }
  });

  it('an upgrade that cannot find the keys Secret fails instead of making new keys', () => {
    expect(renderChart({ set: REQUIRED, upgrade: true }).stderr).toMatch(/keys Secret sandgate-keys was not found while upgrading/);
    expect(renderChart({ set: { ...REQUIRED, 'keys.existingSecret': 'mine' }, upgrade: true }).ok).toBe(true);
  });

  it('refuses to render without a public URL or a database, saying which', () => {
    expect(renderChart({ set: { 'database.url': 'postgres://u:p@db/x' } }).stderr).toMatch(/publicUrl is required/);
    expect(renderChart({ set: { publicUrl: 'https://x.example' } }).stderr).toMatch(/database\.url .* is required/);
  });

  it('gives the gateway exactly what the preflight checks for, in the sandboxes’ namespace only', () => {
    const { objects } = renderChart({ set: REQUIRED });
    const role = find(objects, 'Role', '-sandboxes');
    expect(role.metadata.namespace).toBe('sandgate-sandboxes');
    for (const [verb, resource, sub, group] of NEEDED_PERMISSIONS) {
      const granted = role.rules.some((r: Obj) => r.apiGroups.includes(group) && r.resources.includes(sub ? `${resource}/${sub}` : resource) && r.verbs.includes(verb));
      expect(granted, `${verb} ${resource}${sub ? `/${sub}` : ''}`).toBe(true);
    }
    // Nothing of the cluster beyond reading the one RuntimeClass and the sandboxes' namespace.
    const cluster = find(objects, 'ClusterRole');
    expect(cluster.rules).toEqual([
      { apiGroups: ['node.k8s.io'], resources: ['runtimeclasses'], resourceNames: ['gvisor'], verbs: ['get'] },
      { apiGroups: [''], resources: ['namespaces'], resourceNames: ['sandgate-sandboxes'], verbs: ['get'] },
    ]);
    // The chart makes the deny-all policy: the gateway may not make (or change) any.
    expect(role.rules.find((r: Obj) => r.resources.includes('networkpolicies')).verbs).toEqual(['get']);
    expect(renderChart({ set: { ...REQUIRED, 'networkPolicy.sandboxes': 'false' } }).objects.find((o) => o.kind === 'Role')!.rules.find((r: Obj) => r.resources.includes('networkpolicies')).verbs).toEqual(['get', 'create']);
  });

  it('isolates sandbox pods as the driver does, and runs the gateway unprivileged with the same settings on every replica', () => {
    const { objects } = renderChart({ set: REQUIRED });
    const policy = find(objects, 'NetworkPolicy', 'deny-all');
    expect(policy.spec).toEqual(networkPolicyManifest('x').spec);
    const deployment = find(objects, 'Deployment');
    const pod = deployment.spec.template.spec;
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
    expect(pod.containers[0].securityContext).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } });
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(30);
    expect(deployment.spec.strategy.rollingUpdate).toEqual({ maxUnavailable: 0, maxSurge: 1 });
    // Every variable it sets is one of the gateway's settings (a typo would be ignored silently).
    const known = new Set(SETTINGS.map((s) => s.env));
    for (const e of pod.containers[0].env) if (e.name !== 'POD_IP') expect(known.has(e.name), e.name).toBe(true);
    const env = Object.fromEntries(pod.containers[0].env.map((e: Obj) => [e.name, e.value ?? e.valueFrom]));
    // Each release its own data directory, hence its own gateway id: releases sharing a namespace never take each other's pods.
    expect(env.SANDGATE_DATA_DIR).toBe('/var/lib/sandgate/sandgate-sandgate');
    expect(renderChart({ set: REQUIRED, namespace: 'team-b' }).objects.find((o) => o.kind === 'Deployment')!.spec.template.spec.containers[0].env.find((e: Obj) => e.name === 'SANDGATE_DATA_DIR').value).toBe('/var/lib/sandgate/team-b-sandgate');
    expect(pod.volumes.find((v: Obj) => v.name === 'data').emptyDir.medium).toBe('Memory');
    expect(env).toMatchObject({ SANDGATE_SANDBOX_DRIVER: 'kubernetes', SANDGATE_K8S_NAMESPACE: 'sandgate-sandboxes', SANDGATE_K8S_RUNTIME_CLASS: 'gvisor', SANDGATE_INTERNAL_URL: 'http://$(POD_IP):8787' });
    expect(pod.containers[0].readinessProbe.httpGet.path).toBe('/readyz');
    // The keys every replica shares: one Secret, kept when the release goes.
    const keys = find(objects, 'Secret', '-keys');
    expect(Object.keys(keys.data).sort()).toEqual(['history.key', 'pii.key', 'provider-keys.key', 'replicas.key', 'upstream.key', 'web.key']);
    for (const v of Object.values(keys.data)) expect(Buffer.from(Buffer.from(String(v), 'base64').toString(), 'base64')).toHaveLength(32);
    expect(keys.metadata.annotations['helm.sh/resource-policy']).toBe('keep');
  });

  it('documents every value', () => {
    const lines = fs.readFileSync(path.join(CHART_DIR, 'values.yaml'), 'utf8').split('\n');
    const undocumented = lines.filter((l, i) => /^\s*[A-Za-z][A-Za-z0-9]*:/.test(l) && !lines[i - 1]?.trim().startsWith('#'));
    expect(undocumented).toEqual([]);
  });
});
