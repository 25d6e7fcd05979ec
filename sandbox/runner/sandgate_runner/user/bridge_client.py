"""Call the gateway from code running in a sandgate sandbox (standard library only): a
client of the runner's bridge for user code, as tools/python/sandgate_tools is.

    from bridge_client import call
    rows = call('tools/call', {'server': 'crm', 'tool': 'search', 'arguments': {...}})

The runner gives every execution SANDGATE_BRIDGE (a Unix socket path) and
SANDGATE_EXEC_ID. One connection carries one call: the client sends one JSON line
{"execId", "method", "params"} and reads one JSON line back, {"ok": true, "result"} or
{"ok": false, "error"}. Calls are accepted only while the execution that makes them runs.
"""
import json
import os
import socket

__all__ = ['call', 'BridgeError']


class BridgeError(Exception):
    """The gateway (or the runner) refused or failed the call."""


def call(method, params=None, timeout=None):
    """Sends one call and returns its result; raises BridgeError when ok is false."""
    path = os.environ.get('SANDGATE_BRIDGE')
    exec_id = os.environ.get('SANDGATE_EXEC_ID')
    if not path or not exec_id:
        raise BridgeError('not inside a sandgate execution (SANDGATE_BRIDGE / SANDGATE_EXEC_ID unset)')
    request = json.dumps({'execId': exec_id, 'method': method, 'params': params}).encode() + b'\n'
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b'\n'):
                break
    line = b''.join(chunks)
    if not line:
        raise BridgeError('the runner closed the bridge without answering')
    reply = json.loads(line)
    if not reply.get('ok'):
        raise BridgeError(reply.get('error') or 'the call failed')
    return reply.get('result')
