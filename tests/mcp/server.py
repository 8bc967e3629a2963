"""A small MCP server for the tests, made with the official MCP Python SDK
(FastMCP): `server.py stdio` speaks on stdin/stdout, `server.py http PORT`
serves streamable HTTP at http://127.0.0.1:PORT/mcp.

Every tool call appends a line to the file $MCP_CALLS (the tool's name,
its arguments and the server's process id, as JSON), so a test counts the
calls that ran and the processes that ran them.
"""

import json
import os
import sys
import threading

from mcp.server.fastmcp import FastMCP

transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
server = FastMCP("test-tools", host="127.0.0.1", port=port, log_level="WARNING")


def record(tool, arguments):
    path = os.environ.get("MCP_CALLS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments, "pid": os.getpid()}) + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    record("add", {"a": a, "b": b})
    return a + b


@server.tool()
def search_notes(query: str) -> str:
    """Finds notes about a query."""
    record("search_notes", {"query": query})
    return f"3 notes about {query}"


@server.tool()
def delete_notes() -> str:
    """Deletes every note (a tool the cards' filters leave out)."""
    record("delete_notes", {})
    return "all notes deleted"


@server.tool()
def environment(name: str) -> str:
    """Says whether this server's environment holds a variable."""
    record("environment", {"name": name})
    return "set" if name in os.environ else "unset"


@server.tool()
def broken() -> str:
    """Always fails."""
    record("broken", {})
    raise ValueError("the disk is on fire")


@server.tool()
def quit() -> str:
    """Answers, then the server's process exits."""
    record("quit", {})
    threading.Timer(0.2, lambda: os._exit(0)).start()
    return "bye"


if __name__ == "__main__":
    server.run(transport="streamable-http" if transport == "http" else "stdio")
