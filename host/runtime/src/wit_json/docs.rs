//! The `///` docs a component carries for its exported functions, read from its
//! `package-docs` custom section by wit-parser's decoder.
//!
//! Few components carry one: wit-component's encoder (behind `cargo build` for
//! wasm32-wasip2 and `wasm-tools component new`) keeps docs in the WIT package it embeds
//! in the core module and drops them from the component it writes. A component with no
//! section, or one the decoder refuses, has no docs; it still runs.

use std::collections::BTreeMap;

use wit_parser::decoding::{DecodedWasm, decode};
use wit_parser::{Docs, Resolve, WorldItem, WorldKey};

/// Bytes of one function's doc. A doc becomes the tool's summary in every prompt; without
/// a cap a component could put megabytes there.
const MAX_DOC_BYTES: usize = 4 << 10;

/// The docs of `wasm`'s exported functions, keyed as [`super::ExportedFn::qualified_name`]
/// keys them (`name`, or `interface#name`), each trimmed and cut to [`MAX_DOC_BYTES`].
/// Functions without a doc are absent.
pub(crate) fn function_docs(wasm: &[u8]) -> BTreeMap<String, String> {
    let mut docs = BTreeMap::new();
    let Ok(DecodedWasm::Component(resolve, world)) = decode(wasm) else {
        return docs;
    };
    let mut add = |key: String, doc: &Docs| {
        if let Some(text) = doc.contents.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            docs.insert(key, cut(text));
        }
    };
    for (key, item) in &resolve.worlds[world].exports {
        match item {
            WorldItem::Function(func) => add(func.name.clone(), &func.docs),
            WorldItem::Interface { id, .. } => {
                let Some(interface) = export_name(&resolve, key) else { continue };
                for (name, func) in &resolve.interfaces[*id].functions {
                    add(format!("{interface}#{name}"), &func.docs);
                }
            }
            WorldItem::Type { .. } => {}
        }
    }
    docs
}

/// A component's imports and exports by name (interfaces as `ns:pkg/iface@version`,
/// functions by name), read by wit-parser's decoder without compiling anything; an error
/// says why the bytes are not a component.
pub(crate) fn world_of(wasm: &[u8]) -> Result<(Vec<String>, Vec<String>), crate::RunError> {
    use crate::RunError::Invalid;
    let (resolve, world) = match decode(wasm) {
        Ok(DecodedWasm::Component(resolve, world)) => (resolve, world),
        Ok(DecodedWasm::WitPackage(..)) => {
            return Err(Invalid("a WIT package, not a component".into()));
        }
        Err(e) => return Err(Invalid(format!("not a WebAssembly component: {e}"))),
    };
    let world = &resolve.worlds[world];
    let named = |key: &WorldKey, item: &WorldItem| match item {
        WorldItem::Type { .. } => None,
        _ => export_name(&resolve, key),
    };
    let imports = world.imports.iter().filter_map(|(k, i)| named(k, i)).collect();
    let exports = world.exports.iter().filter_map(|(k, i)| named(k, i)).collect();
    Ok((imports, exports))
}

/// The name an interface is exported under (`ns:pkg/iface@1.0.0`, or a plain name).
/// `Resolve::name_world_key` would panic on an anonymous interface under an interface
/// key, which the decoder should never make; a component is no reason to risk it.
fn export_name(resolve: &Resolve, key: &WorldKey) -> Option<String> {
    match key {
        WorldKey::Name(name) => Some(name.clone()),
        WorldKey::Interface(id) => resolve.id_of(*id),
    }
}

/// `text` cut to at most [`MAX_DOC_BYTES`] on a character boundary, `…` included.
fn cut(text: &str) -> String {
    if text.len() <= MAX_DOC_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_DOC_BYTES - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
