//! The module with threads (app/web/build's pkg-threads/): its memory shared between the
//! Web Workers that run it. This nightly's rustc enables WebAssembly's atomics for
//! `+atomics` but no longer links a shared memory for it (the module came out with a plain
//! memory, which a worker cannot hand to another), so the linker is asked here, for this
//! crate's module alone, as rustc used to: a shared, imported memory, and the thread-local
//! storage symbols wasm-bindgen's thread support starts each thread with.

fn main() {
    let wasm = std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "wasm32");
    let atomics = std::env::var("CARGO_CFG_TARGET_FEATURE")
        .is_ok_and(|features| features.split(',').any(|f| f == "atomics"));
    if wasm && atomics {
        for arg in [
            "--shared-memory",
            "--import-memory",
            "--export=__wasm_init_tls",
            "--export=__tls_size",
            "--export=__tls_align",
            "--export=__tls_base",
        ] {
            println!("cargo:rustc-cdylib-link-arg={arg}");
        }
    }
}
