//! Host-side bindings for the `bx:tool` world, generated from `wit/`.

wasmtime::component::bindgen!({
    world: "bx:tool/tool",
    path: "../../wit",
    // Every host function may trap: that is how the host-call cap stops a guest.
    imports: { default: trappable },
});
