//! Components built from WIT text for the tests: the WIT's exports over a core module whose
//! functions trap (`unreachable`), with a memory and `cabi_realloc`, made into a component
//! by wit-component. Real components to read types from and instantiate, though calling
//! one of their functions traps.

use wasm_encoder::{
    CodeSection, ExportKind, ExportSection, Function, FunctionSection, MemorySection, MemoryType,
    Module, TypeSection, ValType,
};
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::abi::{AbiVariant, WasmSignature, WasmType};
use wit_parser::{LiftLowerAbi, ManglingAndAbi, Resolve, WasmExport, WasmExportKind, WorldItem};

/// The component of the one world in `wit`.
pub(super) fn component_bytes(wit: &str) -> Vec<u8> {
    let (resolve, world) = resolve(wit);
    let mut module = core_module(&resolve, world);
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
        .unwrap();
    ComponentEncoder::default().module(&module).unwrap().validate(true).encode().unwrap()
}

/// The parsed WIT and its one world.
pub(super) fn resolve(wit: &str) -> (Resolve, wit_parser::WorldId) {
    let mut resolve = Resolve::default();
    let package = resolve.push_str("test.wit", wit).unwrap();
    let world = resolve.select_world(&[package], None).unwrap();
    (resolve, world)
}

fn core_module(resolve: &Resolve, world: wit_parser::WorldId) -> Vec<u8> {
    let mangling = ManglingAndAbi::Legacy(LiftLowerAbi::Sync);
    let mut funcs: Vec<(String, WasmSignature)> = Vec::new();
    for (key, item) in &resolve.worlds[world].exports {
        let (interface, iface_funcs) = match item {
            WorldItem::Function(func) => (None, vec![func]),
            WorldItem::Interface { id, .. } => {
                (Some(key), resolve.interfaces[*id].functions.values().collect())
            }
            WorldItem::Type { .. } => continue,
        };
        for func in iface_funcs {
            let export = WasmExport::Func { interface, func, kind: WasmExportKind::Normal };
            let name = resolve.wasm_export_name(mangling, export);
            funcs.push((name, resolve.wasm_signature(AbiVariant::GuestExport, func)));
        }
    }
    let realloc = WasmSignature {
        params: vec![WasmType::I32; 4],
        results: vec![WasmType::I32],
        indirect_params: false,
        retptr: false,
    };
    funcs.push((resolve.wasm_export_name(mangling, WasmExport::Realloc), realloc));

    let (mut types, mut functions, mut exports, mut code) =
        (TypeSection::new(), FunctionSection::new(), ExportSection::new(), CodeSection::new());
    for (index, (name, signature)) in (0u32..).zip(&funcs) {
        let core = |t: &WasmType| match t {
            WasmType::I32 | WasmType::Pointer | WasmType::Length => ValType::I32,
            WasmType::I64 | WasmType::PointerOrI64 => ValType::I64,
            WasmType::F32 => ValType::F32,
            WasmType::F64 => ValType::F64,
        };
        types.ty().function(signature.params.iter().map(core), signature.results.iter().map(core));
        functions.function(index);
        exports.export(name, ExportKind::Func, index);
        let mut body = Function::new([]);
        body.instructions().unreachable().end();
        code.function(&body);
    }
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    exports.export(&resolve.wasm_export_name(mangling, WasmExport::Memory), ExportKind::Memory, 0);

    let mut module = Module::new();
    module.section(&types).section(&functions).section(&memories).section(&exports).section(&code);
    module.finish()
}
