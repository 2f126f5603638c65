"""One call of one tool through `bx mcp`, by the official Python SDK (`mcp` on PyPI,
installed by `make setup`), driven by host/cli/tests/suite/components.rs.

Usage: mcp_call.py BX STATE_DIR WORKSPACE TOOL ARGS_JSON

Prints one JSON object per line: the tool as listed (its name, description and input
schema), then the call's result (its text and whether it is an error).
"""

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


async def main(bx, state, workspace, tool, args):
    params = StdioServerParameters(
        command=bx, args=["--state-dir", state, "mcp", "--workspace", workspace]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            for t in listed.tools:
                if t.name == tool:
                    say("listed", name=t.name, description=t.description, schema=t.input_schema)
            result = await session.call_tool(tool, json.loads(args))
            text = "".join(getattr(c, "text", "") for c in result.content)
            say("called", text=text, error=bool(result.is_error))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:6])
