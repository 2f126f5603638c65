//! A valid component whose one function calls an import that is not WASI, for the
//! store's refusal tests: `bx tool install` must refuse it and name the import.

mod bindings {
    wit_bindgen::generate!({ world: "foreign", path: "wit" });
}

struct Foreign;

impl bindings::Guest for Foreign {
    fn stamp() -> u64 {
        bindings::bx_test::foreign::clock::now()
    }
}

bindings::export!(Foreign with_types_in bindings);
