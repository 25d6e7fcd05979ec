import * as k8s from '@kubernetes/client-node';

/** The API server's answer to a request it refused, read off client-node's error. */
export function apiStatus(e: unknown): { code: number; message: string } | undefined {
  if (!(e instanceof k8s.ApiException)) return undefined;
  const body = e.body as unknown;
  let message = '';
  try {
    const parsed = (typeof body === 'string' ? JSON.parse(body) : body) as { message?: unknown };
    if (typeof parsed?.message === 'string') message = parsed.message;
  } catch {
    message = typeof body === 'string' ? body.slice(0, 300) : '';
  }
  return { code: e.code, message: message || e.message.slice(0, 300) };
}
