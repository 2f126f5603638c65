//! `test.slow-describe`: a tool whose `describe` waits a minute in a WASI sleep before it
//! answers, so that a load (and `bx tool install`) must end by the call deadline rather
//! than wait with it.

use bx_tool_sdk::bindings::Guest;
use bx_tool_sdk::{CallError, Description, Output, ResourceKind, Tool};

struct SlowDescribe;

impl Tool for SlowDescribe {
    const NAME: &'static str = "test.slow-describe";
    const SUMMARY: &'static str = "Test-only: describe sleeps for a minute.";
    const SCHEMA: &'static str = r#"{"type":"object"}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[];

    fn run(_args: &str) -> Result<Output, CallError> {
        Ok(Output::Text("ran".into()))
    }
}

impl Guest for SlowDescribe {
    fn describe() -> Description {
        std::thread::sleep(std::time::Duration::from_secs(60));
        bx_tool_sdk::describe::<SlowDescribe>()
    }

    fn call(args: String) -> Result<Output, CallError> {
        <SlowDescribe as Tool>::run(&args)
    }
}

bx_tool_sdk::bindings::export_tool!(SlowDescribe);
