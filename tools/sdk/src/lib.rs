//! Guest SDK for bx tools: the `bx:tool` bindings, a [`Tool`] trait and the [`tool!`]
//! macro that exports it, so that each tool crate holds only its own logic.
#![deny(missing_docs)]

/// Bindings generated from `wit/` for the `bx:tool/tool` world.
#[allow(missing_docs, unsafe_code, reason = "generated code")]
pub mod bindings {
    wit_bindgen::generate!({
        world: "bx:tool/tool",
        path: "../../wit",
        default_bindings_module: "bx_tool_sdk::bindings",
        pub_export_macro: true,
        export_macro_name: "export_tool",
        generate_all,
    });
}

pub use bindings::bx::host::fs;
pub use bindings::bx::host::http;
pub use bindings::bx::host::types::Error as HostError;
pub use bindings::bx::tool::types::{CallError, Description, Output, ResourceArg, ResourceKind};

/// A tool: its description and what one call does.
pub trait Tool {
    /// Dotted name, such as `fs.read`.
    const NAME: &'static str;
    /// One or two sentences for the model and the owner.
    const SUMMARY: &'static str;
    /// JSON Schema of the arguments object.
    const SCHEMA: &'static str;
    /// Which top-level arguments name resources.
    const RESOURCES: &'static [(&'static str, ResourceKind)];

    /// Runs one call with the arguments as JSON text.
    fn run(args: &str) -> Result<Output, CallError>;
}

/// The `describe` answer for a [`Tool`].
pub fn describe<T: Tool>() -> Description {
    Description {
        name: T::NAME.to_owned(),
        summary: T::SUMMARY.to_owned(),
        args_schema: T::SCHEMA.to_owned(),
        resources: T::RESOURCES
            .iter()
            .map(|(arg, kind)| ResourceArg { arg: (*arg).to_owned(), kind: *kind })
            .collect(),
    }
}

/// Parses the arguments object strictly into `A` (use `#[serde(deny_unknown_fields)]`).
pub fn parse_args<A: serde::de::DeserializeOwned>(args: &str) -> Result<A, CallError> {
    serde_json::from_str(args).map_err(|e| CallError::InvalidArgs(e.to_string()))
}

/// Serialises `value` as a JSON output.
pub fn json_output<V: serde::Serialize>(value: &V) -> Result<Output, CallError> {
    serde_json::to_string(value)
        .map(Output::Json)
        .map_err(|e| CallError::Failed(format!("could not encode output: {e}")))
}

/// Turns a host error into the call error the owner should see: a denial stays a
/// denial, with the host's reason; anything else is a failure naming `what`.
pub fn host_error(what: &str, err: HostError) -> CallError {
    match err {
        HostError::Denied(reason) => CallError::Denied(reason),
        HostError::NotFound(m) => CallError::Failed(format!("{what}: not found: {m}")),
        HostError::AlreadyExists(m) => CallError::Failed(format!("{what}: already exists: {m}")),
        HostError::Invalid(m) => CallError::Failed(format!("{what}: invalid: {m}")),
        HostError::TooLarge(m) => CallError::OutputTooLarge(format!("{what}: {m}")),
        HostError::Failed(m) => CallError::Failed(format!("{what}: {m}")),
    }
}

/// Exports a [`Tool`] as the component's `describe` and `call`.
#[macro_export]
macro_rules! tool {
    ($ty:ident) => {
        impl $crate::bindings::Guest for $ty {
            fn describe() -> $crate::Description {
                $crate::describe::<$ty>()
            }
            fn call(args: ::std::string::String) -> Result<$crate::Output, $crate::CallError> {
                <$ty as $crate::Tool>::run(&args)
            }
        }
        $crate::bindings::export_tool!($ty);
    };
}
