//! Headroom in a web page: the engine compiled to WebAssembly, started from the page's
//! address, reporting each event as the JSON line `trainer-cli --json` prints.
//!
//! The settings and the page's window (`ui`, egui) are plain Rust and tested natively; the
//! worker's side (`page`) and the window's runner (`canvas`) exist only in the WebAssembly
//! build (`app/web/build`).

pub mod picked;
pub mod settings;
pub mod ui;

#[cfg(target_arch = "wasm32")]
mod canvas;
#[cfg(target_arch = "wasm32")]
mod page;

/// rayon's pool as Web Workers sharing the module's memory, in a build with threads
/// (app/web/build): the worker starts it (`initThreadPool`) before the run.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
pub use wasm_bindgen_rayon::init_thread_pool;
