//! Host-side bindings for the `bx:tool` world, generated from `wit/`.

wasmtime::component::bindgen!({
    world: "bx:tool/tool",
    path: "../../wit",
    // Every host function may trap (that is how the host-call cap stops a guest), and is
    // async, so a call's deadline holds while the guest waits in one (an HTTP request,
    // a sleep): the whole call is a future that the deadline drops.
    imports: { default: async | trappable },
    exports: { default: async },
});
