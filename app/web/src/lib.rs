//! Headroom in a web page: the engine compiled to WebAssembly, started from the page's
//! address, reporting each event as the JSON line `trainer-cli --json` prints.
//!
//! The settings are plain Rust and tested natively; the page's side (`page`) exists only in
//! the WebAssembly build (`app/web/build`).

pub mod picked;
pub mod settings;

#[cfg(target_arch = "wasm32")]
mod page;
