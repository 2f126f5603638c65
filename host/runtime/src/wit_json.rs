//! WIT types and JSON: the functions a standard component exports, the JSON Schema of
//! each one's arguments, and the conversion of JSON arguments to component values and of
//! results back to JSON, all by one set of rules.
//!
//! The representation, the same for arguments and results:
//!
//! | WIT | JSON |
//! | --- | --- |
//! | `bool` | `true` / `false` |
//! | `s8` … `u64` | an integer within the type's range (an integral float such as `2.0` is that integer) |
//! | `f32`, `f64` | a number (`f32` within its finite range); a NaN or infinite result is `null` |
//! | `char` | a string of exactly one Unicode scalar |
//! | `string` | a string |
//! | `list<T>` | an array of `T` |
//! | `tuple<A, B, …>` | an array of exactly that many items, in order |
//! | `record` | an object keyed by field name; an `option` field may be left out (= none) |
//! | `enum` | one of the case names, as a string |
//! | `flags` | an array of distinct flag names |
//! | `variant` | a payload-less case's name as a string, or `{"case": payload}` |
//! | `option<T>` | `T`, or `null` for none (so `option<option<T>>` cannot say `some(none)`) |
//! | `result<T, E>` | `{"ok": T}` or `{"err": E}`, with `null` for a missing `T` or `E` |
//!
//! Resources, futures, streams, error contexts, maps and fixed-length lists have no JSON
//! form here: a function using one is listed with the reason, for the caller to refuse.

use wasmtime::component::types::{ComponentFunc, ComponentItem, Type};
use wasmtime::component::{Component, Func, Instance};
use wasmtime::{AsContextMut, Engine};

mod convert;
mod docs;
mod schema;
#[cfg(test)]
mod tests;

pub use convert::ArgError;
pub(crate) use convert::{args_to_vals, render, split_result, vals_to_json};
pub(crate) use docs::{function_docs, world_of};
pub(crate) use schema::{args_schema, result_schema};

/// Functions one component may export. Each becomes a tool in every prompt, so without a
/// cap a component could fill the model's context with tool definitions.
const MAX_FUNCTIONS: usize = 256;

/// Levels of nested types in one parameter or result (`list<list<u8>>` is three). Every
/// walk over a type or a value recurses once per level; without a cap a component would
/// choose how deep the host's stack goes, and the model could not follow the schema.
pub(crate) const MAX_DEPTH: usize = 32;

/// Bytes of one function's argument (or result) schema, serialized. The schema goes into
/// every prompt; without a cap a component could put megabytes there, and a type
/// referenced from many places could expand exponentially while being written out.
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 << 10;

/// Why a function's types cannot be given JSON form, or a component's exports refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TypeError {
    /// A parameter or the result uses a type with no JSON form.
    #[error("{at} uses {what}, which has no JSON form")]
    Unsupported {
        /// Which parameter (`parameter \`path\``) or `the result`.
        at: String,
        /// The type, in words (`a resource handle (own)`).
        what: &'static str,
    },
    /// A parameter or the result nests types deeper than [`MAX_DEPTH`].
    #[error("{at} nests types deeper than {limit} levels")]
    TooDeep {
        /// Which parameter or `the result`.
        at: String,
        /// The cap.
        limit: usize,
    },
    /// The schema would be larger than [`MAX_SCHEMA_BYTES`].
    #[error("the JSON Schema of {of} would be larger than {limit} bytes")]
    TooLarge {
        /// `the arguments` or `the result`.
        of: &'static str,
        /// The cap.
        limit: usize,
    },
    /// The component exports more functions than [`MAX_FUNCTIONS`].
    #[error("the component exports {count} functions, more than {limit}")]
    TooManyFunctions {
        /// Functions found.
        count: usize,
        /// The cap.
        limit: usize,
    },
}

/// One function a component exports: at the top of its world, or inside an exported
/// interface.
#[derive(Debug, Clone)]
pub(crate) struct ExportedFn {
    /// The function's name as exported (`get-forecast`).
    pub(crate) name: String,
    /// The exported interface holding it (`bx-test:files/extra@0.1.0`), if any.
    pub(crate) interface: Option<String>,
    /// Parameters, in order, by name.
    pub(crate) params: Vec<(String, Type)>,
    /// Result types: none or one.
    pub(crate) results: Vec<Type>,
    /// The JSON Schemas of its arguments and result, or why it has none (a resource
    /// parameter, types too deep, a schema too large): then it cannot be called as a tool.
    pub(crate) schema: Result<FnSchema, TypeError>,
}

/// The JSON Schemas of a function's arguments object and of its result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FnSchema {
    /// Of the arguments: an object keyed by parameter name.
    pub(crate) args: serde_json::Value,
    /// Of the result (`{"type":"null"}` for a function without one).
    pub(crate) result: serde_json::Value,
}

impl ExportedFn {
    fn new(name: String, interface: Option<String>, func: &ComponentFunc) -> ExportedFn {
        let params: Vec<(String, Type)> =
            func.params().map(|(name, ty)| (name.to_owned(), ty)).collect();
        let results: Vec<Type> = func.results().collect();
        let schema = args_schema(&params)
            .and_then(|args| Ok(FnSchema { args, result: result_schema(&results)? }));
        ExportedFn { name, interface, params, results, schema }
    }

    /// `interface#name`, or `name` at the top of the world: the key of [`function_docs`].
    pub(crate) fn qualified_name(&self) -> String {
        match &self.interface {
            Some(interface) => format!("{interface}#{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// Every function `component` exports, top-level ones and those of exported interfaces,
/// in export order. Functions whose types have no JSON form are listed too, with the
/// reason in [`ExportedFn::schema`]. Exported types, resources, modules and components are
/// not functions and are not listed.
pub(crate) fn exported_functions(
    engine: &Engine,
    component: &Component,
) -> Result<Vec<ExportedFn>, TypeError> {
    let ty = component.component_type();
    // Named first, then typed: a component over the cap is refused before any schema is
    // written.
    let mut found: Vec<(String, Option<String>, ComponentFunc)> = Vec::new();
    for (name, export) in ty.exports(engine) {
        match export.ty {
            ComponentItem::ComponentFunc(func) => found.push((name.to_owned(), None, func)),
            ComponentItem::ComponentInstance(instance) => {
                for (inner, export) in instance.exports(engine) {
                    if let ComponentItem::ComponentFunc(func) = export.ty {
                        found.push((inner.to_owned(), Some(name.to_owned()), func));
                    }
                }
            }
            ComponentItem::CoreFunc(_)
            | ComponentItem::Module(_)
            | ComponentItem::Component(_)
            | ComponentItem::Type(_)
            | ComponentItem::Resource(_) => {}
        }
    }
    if found.len() > MAX_FUNCTIONS {
        return Err(TypeError::TooManyFunctions { count: found.len(), limit: MAX_FUNCTIONS });
    }
    Ok(found
        .into_iter()
        .map(|(name, interface, func)| ExportedFn::new(name, interface, &func))
        .collect())
}

/// The callable function `f` names in `instance`: `None` when `instance` has no such
/// export (it is of another component than the one `f` was listed from). `store` must own
/// `instance`, as for every wasmtime lookup (wasmtime panics otherwise).
pub(crate) fn lookup(
    instance: &Instance,
    mut store: impl AsContextMut,
    f: &ExportedFn,
) -> Option<Func> {
    match &f.interface {
        None => instance.get_func(&mut store, f.name.as_str()),
        Some(interface) => {
            let outer = instance.get_export_index(&mut store, None, interface)?;
            let inner = instance.get_export_index(&mut store, Some(&outer), &f.name)?;
            instance.get_func(&mut store, inner)
        }
    }
}
