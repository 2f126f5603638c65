//! The names bx's spans and metrics use. GenAI and MCP follow the OpenTelemetry semantic
//! conventions v1.37.0 (both in development status: names may still change upstream);
//! what they do not name is `bx.*`.

/// What a GenAI span does: `invoke_agent`, `chat`, `execute_tool`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// The agent's name (`bx`).
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// The conversation: bx's session id.
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// The model asked for (llama-server's own name for it, as it reports it).
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// The model that answered.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Who serves the model.
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// Prompt tokens.
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Generated tokens.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Why the model stopped.
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// The tool's name.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// The call's id.
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function` for every bx tool.
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// The call's arguments, only with `[telemetry] content`.
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// The call's result, only with `[telemetry] content`.
pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// The class of an error that ended the operation.
pub const ERROR_TYPE: &str = "error.type";

/// The MCP method (`tools/call`).
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
/// The MCP session.
pub const MCP_SESSION_ID: &str = "mcp.session.id";
/// The JSON-RPC request id.
pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
/// `pipe` (stdio) or `tcp`.
pub const NETWORK_TRANSPORT: &str = "network.transport";

/// The request record's sequence number in the audit log: the signed record that proves
/// the call.
pub const BX_AUDIT_SEQ: &str = "bx.audit.seq";
/// The broker's verdict: `allow`, `ask`, `deny`.
pub const BX_DECISION: &str = "bx.decision";
/// The session's taint when the call was decided.
pub const BX_TAINT: &str = "bx.taint";
/// The label of what a call read or returned.
pub const BX_LABEL: &str = "bx.label";
/// The approval's id.
pub const BX_APPROVAL_ID: &str = "bx.approval.id";
/// How it was answered: `approve`, `refuse`, `expired`.
pub const BX_APPROVAL_ANSWER: &str = "bx.approval.answer";
/// Who answered: `owner` or `reviewer`.
pub const BX_APPROVAL_BY: &str = "bx.approval.by";
/// How a call ended: `ok`, `error`, `stopped`, `refused`.
pub const BX_OUTCOME: &str = "bx.outcome";
/// Which bx process: `daemon` or `mcp`.
pub const BX_PROCESS: &str = "bx.process";

/// Metric: calls decided, by tool and verdict.
pub const METRIC_CALLS: &str = "bx.tool.calls";
/// Metric: calls waiting for the owner now.
pub const METRIC_APPROVALS_WAITING: &str = "bx.approvals.waiting";
/// Metric: how long an approval waited, seconds.
pub const METRIC_APPROVAL_WAIT: &str = "bx.approval.duration";
/// Metric: a call's whole time through the trust path, seconds.
pub const METRIC_CALL_DURATION: &str = "bx.tool.call.duration";
/// Metric: writing and syncing a call's request and decision records, seconds.
pub const METRIC_AUDIT_APPEND: &str = "bx.audit.append.duration";
