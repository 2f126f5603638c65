//! The [`Runtime`]: one wasmtime engine with the pooling allocator and epoch interruption,
//! a linker holding exactly the host functions tools get, and the epoch ticker. Calls are
//! futures: the guest yields to the executor at every epoch tick and while it waits in a
//! host call, so a call's deadline holds wherever the guest is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings;
use crate::error::{RunError, chain};
use crate::limits::Limits;
use crate::state::CallState;

/// How often the epoch advances. A deadline is rounded up to whole ticks.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Instances that may exist at once across all calls (the pool's size). More concurrent
/// calls than this fail to instantiate rather than exhaust host memory.
const MAX_CONCURRENT_INSTANCES: u32 = 64;

/// Bytes of each linear memory kept resident between instances and reset with `memset`
/// (only the pages actually touched, where the kernel has `PAGEMAP_SCAN`) instead of
/// being returned to the kernel: a fresh instance then takes no page faults for memory
/// its predecessor used. Measured by `make bench` (fs.read of 1 MiB).
const KEEP_RESIDENT_BYTES: usize = 8 << 20;

/// Stack of each call's fiber: a call runs on its own stack so that its future can be
/// suspended in a host call and dropped at the deadline. Wasm's own stack
/// (`max_wasm_stack`, 512 KiB by default) lives inside it.
const ASYNC_STACK_BYTES: usize = 2 << 20;

/// Core modules, memories and tables one tool component may contain. A Rust tool built
/// for wasm32-wasip2 has a handful; a component with more is refused at load.
const MAX_CORE_PER_COMPONENT: u32 = 16;

/// The engine and linker shared by every call. Cheap to share across threads.
pub struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<CallState>,
    pub(crate) limits: Limits,
    ticker_stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("limits", &self.limits).finish_non_exhaustive()
    }
}

fn config(limits: &Limits) -> Config {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_CONCURRENT_INSTANCES)
        .total_core_instances(MAX_CONCURRENT_INSTANCES * MAX_CORE_PER_COMPONENT)
        .total_memories(MAX_CONCURRENT_INSTANCES * 2)
        .total_tables(MAX_CONCURRENT_INSTANCES * MAX_CORE_PER_COMPONENT)
        .max_memories_per_component(2)
        .max_tables_per_component(MAX_CORE_PER_COMPONENT)
        .max_core_instances_per_component(MAX_CORE_PER_COMPONENT)
        .max_memory_size(limits.memory_bytes)
        .total_stacks(MAX_CONCURRENT_INSTANCES)
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES / 64)
        .pagemap_scan(wasmtime::Enabled::Auto);
    let mut config = Config::new();
    config
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .epoch_interruption(true)
        .async_stack_size(ASYNC_STACK_BYTES)
        .wasm_component_model(true);
    config
}

/// The key that precompiled artifacts are filed under: wasmtime's version and a hash of
/// every engine setting that affects compiled code. A changed key means recompile.
pub fn engine_key(runtime: &Runtime) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    runtime.engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("wasmtime-{}-{:016x}", wasmtime_version(), hasher.finish())
}

fn wasmtime_version() -> &'static str {
    // Pinned in Cargo.toml; a change of version changes this string and the cache key.
    "48.0.8"
}

impl Runtime {
    /// Builds the engine, the linker and the epoch ticker with `limits`.
    pub fn new(limits: Limits) -> Result<Runtime, RunError> {
        // Which mount is the root file system, asked before any call runs.
        crate::mounts::root_mount();
        let engine = Engine::new(&config(&limits)).map_err(|e| RunError::Engine(chain(&e)))?;
        let mut linker = Linker::new(&engine);
        // WASI for std: stdio (bounded pipes), clocks, random. The context built per call
        // has no preopens, no environment, no arguments and denies every socket address.
        // Async, so that a guest blocked in WASI (a sleep, a poll) is still inside the
        // call's future and the deadline drops it.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| RunError::Engine(chain(&e)))?;
        // `wasi:filesystem` is bx's own, through the checked filesystem (`wasi_fs.rs`):
        // its two interfaces replace wasmtime-wasi's.
        linker.allow_shadowing(true);
        {
            use wasmtime_wasi::p2::bindings::filesystem::{preopens, types};
            types::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)
                .map_err(|e| RunError::Engine(chain(&e)))?;
            preopens::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)
                .map_err(|e| RunError::Engine(chain(&e)))?;
        }
        linker.allow_shadowing(false);
        // `wasi:http` for standard components: wasmtime-wasi-http's types, every request
        // sent by bx's checked HTTP (`wasi_http.rs`).
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|e| RunError::Engine(chain(&e)))?;
        bindings::Tool::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)
            .map_err(|e| RunError::Engine(chain(&e)))?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let weak = engine.weak();
        let stop = Arc::clone(&ticker_stop);
        std::thread::Builder::new()
            .name("bx-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| RunError::Engine(format!("cannot start the epoch thread: {e}")))?;
        Ok(Runtime { engine, linker, limits, ticker_stop })
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Compiles a component to the engine's native code, for the precompiled cache.
    pub fn precompile(&self, bytes: &[u8]) -> Result<Vec<u8>, RunError> {
        self.engine.precompile_component(bytes).map_err(|e| RunError::Invalid(chain(&e)))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}
