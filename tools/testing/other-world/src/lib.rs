//! A valid component of another world, for the store's refusal tests.

mod bindings {
    wit_bindgen::generate!({ world: "other", path: "wit" });
}

struct Other;

impl bindings::Guest for Other {
    fn greet(name: String) -> String {
        format!("hello {name}")
    }
}

bindings::export!(Other with_types_in bindings);
