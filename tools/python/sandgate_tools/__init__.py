"""sandgate_tools: call the upstream MCP tools sandgate offers you, from Python in the sandbox.

    from sandgate_tools import call_mcp_tool, list_tools, describe_tool
    tools = list_tools()                            # what you may call
    info = describe_tool("memory", "read_graph")    # its description and input schema
    graph = call_mcp_tool("memory", "read_graph", {})

Typed functions for every tool live in sandgate_tools.servers.<server>, e.g.
    from sandgate_tools.servers.memory import read_graph

How it works: each call sends one JSON line to the sandgate runner over the Unix socket at
$SANDGATE_BRIDGE; the gateway checks that you may call the tool, calls the upstream MCP
server (with credentials that never enter this sandbox), records the call and answers with
one JSON line. Every failure arrives here as a ToolError whose message says what went wrong.
Standard library only.
"""

import json
import os
import socket
import sys

__all__ = ["ToolError", "call_mcp_tool", "list_tools", "describe_tool", "tool_result_value", "OMIT"]

DEFAULT_BRIDGE = "/tmp/.sandgate/bridge.sock"


class ToolError(Exception):
    """A failed tool call: the upstream tool's own error, or the gateway's reason.

    Attributes: server, tool (when known) and result (the tool's result when the tool
    itself reported the error).
    """

    def __init__(self, message, server=None, tool=None, result=None):
        super().__init__(message)
        self.server = server
        self.tool = tool
        self.result = result


class _Omit:
    """Default of optional parameters in generated functions: the argument is not sent."""

    def __repr__(self):
        return "OMIT"

    def __bool__(self):
        return False


OMIT = _Omit()


def _arguments(named, extra):
    """Arguments for a generated function: named parameters that were given, plus extra ones."""
    args = {k: v for k, v in named.items() if v is not OMIT}
    args.update(extra)
    return args


def _request(method, params):
    path = os.environ.get("SANDGATE_BRIDGE") or DEFAULT_BRIDGE
    line = json.dumps({"method": method, "params": params, "execId": os.environ.get("SANDGATE_EXEC_ID", "")})
    buf = bytearray()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError as e:
            raise ToolError("cannot reach the sandgate bridge at %s: %s" % (path, e.strerror or e)) from None
        s.sendall(line.encode("utf-8") + b"\n")
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    first = bytes(buf).split(b"\n", 1)[0].decode("utf-8", "replace")
    if not first.strip():
        raise ToolError("the sandgate bridge closed the connection without an answer")
    try:
        reply = json.loads(first)
    except ValueError:
        raise ToolError("the sandgate bridge sent something that is not JSON: %s" % first[:200]) from None
    if not reply.get("ok"):
        raise ToolError(reply.get("error") or "the gateway reported an error without a message")
    return reply.get("result")


def tool_result_value(result):
    """The useful value of a tool result: its structured content when there is some, else
    the parsed JSON of a single text block (or the text itself), else the content list."""
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    content = result.get("content") or []
    if not content:
        return None
    if len(content) == 1 and content[0].get("type") == "text":
        text = content[0].get("text", "")
        try:
            return json.loads(text)
        except ValueError:
            return text
    return content


def _error_text(result):
    texts = [c.get("text", "") for c in result.get("content") or [] if c.get("type") == "text"]
    return "\n".join(texts).strip() or "the tool reported an error without a message"


def call_mcp_tool(server, tool, args=None, raw=False):
    """Call a tool of an upstream MCP server.

    Returns tool_result_value() of its result, or the full result dict with raw=True.
    Raises ToolError when the tool reports an error, when you may not call it, or when
    the server cannot be reached.
    """
    try:
        result = _request("tools/call", {"server": server, "tool": tool, "arguments": dict(args or {})})
    except ToolError as e:
        raise ToolError(str(e), server, tool) from None
    if raw:
        return result
    if result.get("isError"):
        raise ToolError("%s/%s: %s" % (server, tool, _error_text(result)), server, tool, result)
    return tool_result_value(result)


def list_tools(server=None):
    """The tools you may call, of one server or of all, as dicts: server, tool, title,
    description, path (TypeScript wrapper), function (its TS name), python (dotted path).
    Servers that cannot be reached right now are reported on stderr."""
    r = _request("tools/list", {} if server is None else {"server": server})
    for u in r.get("unavailable") or []:
        print('sandgate: upstream server "%s" is unavailable: %s' % (u["server"], u["error"]), file=sys.stderr)
    return r["tools"]


def describe_tool(server, tool):
    """One tool's description and JSON schemas (inputSchema, outputSchema)."""
    return _request("tools/describe", {"server": server, "tool": tool})
