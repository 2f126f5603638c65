"""A real MCP client of `bx mcp`: the official Python SDK (`mcp` on PyPI, installed by
`make setup`), driven by host/cli/tests/suite/mcp.rs.

Usage: mcp_client.py stdio BX STATE_DIR WORKSPACE
       mcp_client.py http URL TOKEN

Over stdio it starts `bx mcp` the way an agent's configuration would; over Streamable
HTTP it connects to a running `bx mcp --http` with the bearer token. It prints one
JSON object per line for each step, so the Rust test asserts on what a real client saw:
the tool list, a granted call, a refused call, a call that waits for the owner (the
test approves it with `bx approve` from another process), a call to a tool that does
not exist, and the `tools/list_changed` notification after the test installs a tool
(it prints `install-now` and waits for the notification).
"""

import json
import sys

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def scenario(read, write, changed, on_message):
    async with ClientSession(read, write, message_handler=on_message) as session:
        init = await session.initialize()
        say("initialized", server=init.server_info.name, tools=init.capabilities.tools is not None)

        listed = await session.list_tools()
        say(
            "listed",
            tools=sorted(t.name for t in listed.tools),
            schema=next(t.input_schema for t in listed.tools if t.name == "fs.read"),
        )

        r = await session.call_tool("fs.read", {"path": "notes.txt"})
        say("granted", is_error=r.is_error, text=text_of(r))

        r = await session.call_tool("fs.read", {"path": "../outside.txt"})
        say("refused", is_error=r.is_error, text=text_of(r))

        progress = []

        async def on_progress(value, total, message):
            progress.append(message)

        r = await session.call_tool(
            "fs.write",
            {"path": "new.txt", "content": "written over MCP\n"},
            progress_callback=on_progress,
        )
        say("asked", is_error=r.is_error, text=text_of(r), progress=progress)

        try:
            await session.call_tool("no.such.tool", {})
            say("unknown", error=None)
        except MCPError as e:
            say("unknown", code=e.code, error=e.message)

        say("install-now")
        with anyio.fail_after(30):
            await changed.wait()
        listed = await session.list_tools()
        say("changed", tools=sorted(t.name for t in listed.tools))


async def main(transport, *rest):
    changed = anyio.Event()

    async def on_message(message):
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            changed.set()

    if transport == "stdio":
        bx, state, workspace = rest
        params = StdioServerParameters(
            command=bx, args=["--state-dir", state, "mcp", "--workspace", workspace]
        )
        async with stdio_client(params) as (read, write):
            await scenario(read, write, changed, on_message)
    else:
        url, token = rest
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                await scenario(read, write, changed, on_message)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
