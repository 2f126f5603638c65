"""Calls of tools through `bx mcp`, by the official Python SDK (`mcp` on PyPI, installed
by `make setup`), driven by the CLI's tests (components.rs, py_run.rs, gateway.rs).

Usage: mcp_call.py BX STATE_DIR WORKSPACE TOOL ARGS_JSON [TOOL ARGS_JSON]...

The calls are made in order in one MCP session (one bx session: each sees the taint the
ones before it raised). Prints one JSON object per line: each tool named as listed (its
name, description and input schema), then each call's result (its text and whether it is
an error).
"""

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


async def main(bx, state, workspace, *calls):
    params = StdioServerParameters(
        command=bx, args=["--state-dir", state, "mcp", "--workspace", workspace]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            pairs = list(zip(calls[0::2], calls[1::2]))
            for t in listed.tools:
                if t.name in {tool for tool, _ in pairs}:
                    say("listed", name=t.name, description=t.description, schema=t.input_schema)
            for tool, args in pairs:
                result = await session.call_tool(tool, json.loads(args))
                text = "".join(getattr(c, "text", "") for c in result.content)
                say("called", tool=tool, text=text, error=bool(result.is_error))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
