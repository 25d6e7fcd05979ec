"""Requests as the worker queues them: a Job, and an exec request checked (and its
defaults filled in) before it is queued."""
import os

from .settings import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT_MS, LANGUAGES


class Job:
    __slots__ = ('kind', 'id', 'req', 'cancelled', 'finished', 'quiet')

    def __init__(self, kind, req):
        self.kind = kind  # 'exec' | 'preload'
        self.id = req['id']
        self.req = req
        self.cancelled = False
        self.finished = False
        self.quiet = False  # a round trip that left no garbage behind (a warm-up that found all well)


def parse_exec(req):
    """Validates an exec request in place (filling defaults); returns an error or None."""
    if req.get('language') not in LANGUAGES:
        return 'unknown language %r (expected one of %s)' % (req.get('language'), ', '.join(LANGUAGES))
    if not isinstance(req.get('code'), str):
        return '"code" must be a string'
    timeout = req.setdefault('timeoutMs', DEFAULT_TIMEOUT_MS)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        return '"timeoutMs" must be a positive number'
    limit = req.setdefault('outputLimit', DEFAULT_OUTPUT_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        return '"outputLimit" must be a non-negative integer'
    env = req.setdefault('env', {})
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and '=' not in k and '\0' not in k + v
            for k, v in env.items()):
        return '"env" must map variable names to strings'
    if not isinstance(req.setdefault('reset', False), bool):
        return '"reset" must be a boolean'
    flags = req.setdefault('denoFlags', [])
    if not isinstance(flags, list) or not all(isinstance(f, str) and f.startswith('-') for f in flags):
        return '"denoFlags" must be a list of flags'
    fs = req.get('fs')
    if fs is not None:
        if not isinstance(fs, dict):
            return '"fs" must be {"readOnly": [...], "hidden": [...]}'
        for key in ('readOnly', 'hidden'):
            paths = fs.get(key, [])
            if not isinstance(paths, list) or not all(
                    isinstance(p, str) and p.startswith('/') and '\0' not in p for p in paths):
                return '"fs.%s" must be a list of absolute paths' % key
            if key == 'hidden' and any(os.path.normpath(p) == '/' for p in paths):
                return '"/" cannot be hidden'
        # Nothing to narrow: run as usual (and pay nothing for it).
        req['fs'] = fs if fs.get('readOnly') or fs.get('hidden') else None
    return None
