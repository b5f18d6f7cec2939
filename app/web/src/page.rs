//! The WebAssembly side: what the page's worker calls (www/worker.js).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use headroom_core::budget::Budget;
use headroom_core::budget::{BudgetSource, ResolvedBudget};
use headroom_core::checkpoint::CheckpointFiles;
use headroom_core::data::LoaderOptions;
use headroom_core::events::Event;
use headroom_core::memory::alloc::CountingAllocator;
use headroom_core::setting::Described;
use headroom_core::spec::RunSpec;
use headroom_core::{BackendKind, RunOptions, TrainError, Trainer};
use headroom_datasets::LoadedFile;
use wasm_bindgen::prelude::*;

use crate::picked::folder_name;
use crate::settings::{Keys, PageSettings, WebBackend};

// The CPU backend's memory is the page's heap: counted here as trainer-cli counts RAM.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

/// WebAssembly's 32-bit memory: what a page's heap can grow to at most.
const WASM32_MEMORY_BYTES: u64 = 4 << 30;

/// The budget on WebGPU unless the address gives one.
const WEBGPU_DEFAULT_BUDGET: u64 = 1 << 30;

/// The page's Pause and Stop, which the run reads at every step boundary (one run per
/// worker: the page starts a worker for each).
static PAUSED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);
static STOPPED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Pauses the run at its next step boundary (`true`), or lets it go on (`false`).
#[wasm_bindgen]
pub fn pause(paused: bool) {
    PAUSED.store(paused, Ordering::Relaxed);
}

/// Stops the run at its next step boundary: it validates and ends as a finished run does,
/// with `stopped_early`, and does not score the test split.
#[wasm_bindgen]
pub fn stop() {
    STOPPED.store(true, Ordering::Relaxed);
}

#[wasm_bindgen(start)]
fn start() {
    // A panic aborts the instance: say why in the console before it does.
    console_error_panic_hook::set_once();
    #[cfg(not(target_feature = "atomics"))]
    run_static_constructors();
}

/// Runs the module's static constructors (cubecl's thousands of `inventory` registrations)
/// once. When no export runs them, the linker takes the module for a command and runs them
/// at the start of every call into it from JavaScript: each of the window's animation frames
/// and each of the engine's awaits then ran all of them, and the idle page's own thread was
/// busy half the time (docs/BENCHMARKS.md, the web page). The module with threads has no
/// cubecl, no constructors, and is left as it is.
#[cfg(not(target_feature = "atomics"))]
fn run_static_constructors() {
    unsafe extern "C" {
        fn __wasm_call_ctors();
    }
    // SAFETY: the linker's own function; called once, from the module's start, before
    // anything reads what the constructors register.
    unsafe { __wasm_call_ctors() }
}

/// A run's error with the settings that fix it named as the address' keys.
fn in_keys(error: TrainError) -> JsError {
    in_keys_of(&error)
}

/// Core's error with the settings that fix it named as the address' keys.
fn in_keys_of(error: &dyn Described) -> JsError {
    JsError::new(&error.describe(&Keys))
}

/// The threads a run on the CPU takes: the address's `threads`, or `cores` (also for an
/// address that `train` will reject, in its own words).
#[wasm_bindgen]
pub fn cpu_threads(query: &str, cores: usize) -> usize {
    PageSettings::cpu_threads(query, cores)
}

/// Trains with the settings of the page's address `query`; `webgpu`: whether the browser
/// offers WebGPU here; `files`: the folder the user picked or dropped, as `{path, bytes}`
/// objects (`path` from the folder's name down, `bytes` a Uint8Array), empty for the
/// built-in dataset; `checkpoint`: the files of a checkpoint to resume from, as `{name,
/// bytes}` objects, empty for a new run. Each event goes to `emit` as one JSON line, each
/// file of the run to `offer` as (name, text or bytes) for the page to offer as a download,
/// and what the page should say beside them to `note`. Errors come back as the words
/// trainer-cli would print, the settings named as the address' keys.
#[wasm_bindgen]
pub async fn train(
    query: String,
    webgpu: bool,
    files: js_sys::Array,
    checkpoint: js_sys::Array,
    page: Callbacks,
) -> Result<(), JsError> {
    let settings = PageSettings::parse(&query)?;
    let files = loaded_files(&files)?;
    let resume = checkpoint_files(&checkpoint)?;
    let spec = settings.spec(folder_name(&files).as_deref());
    let mut sink = |event: Event| page.emit(&event);
    let (backend, reason) = choose(settings.backend, webgpu).await?;
    sink(Event::BackendChoice {
        backend: backend.name().to_string(),
        reason,
    });
    let ResolvedBudget {
        bytes: budget_bytes,
        source,
    } = budget(&spec, backend)?;
    sink(Event::Budget {
        bytes: budget_bytes,
        source,
    });
    let options = RunOptions {
        planning: spec.planning(budget_bytes).map_err(|e| in_keys_of(&e))?,
        budget: Some(Budget::new(budget_bytes)),
        pause: Some(PAUSED.clone()),
        stop: Some(STOPPED.clone()),
        loader: LoaderOptions {
            files: (!files.is_empty()).then(|| files.into()),
            ..LoaderOptions::default()
        },
        ..RunOptions::default()
    };
    let mut trainer = match resume {
        Some(saved) => {
            let name = std::path::Path::new(UPLOADED);
            let config = saved.state(name)?.config;
            let resumed = spec
                .resume(&config, Some(backend.into()))
                .map_err(|e| in_keys_of(&e))?;
            Trainer::resume_files_async(saved, name, &resumed.changes, options)
                .await
                .map_err(in_keys)?
        }
        None => {
            let config = spec
                .train_config(backend.into())
                .map_err(|e| in_keys_of(&e))?;
            Trainer::new_async(config, options).await.map_err(in_keys)?
        }
    };
    trainer.run_async(&mut sink).await.map_err(in_keys)?;
    // The files `--out` would hold at this step, which `trainer-cli train --resume` takes.
    match trainer.checkpoint_files() {
        Ok(files) => {
            for (name, bytes) in files.named() {
                page.offer(name, &js_sys::Uint8Array::from(bytes));
            }
        }
        Err(error) => page.note(&format!("No checkpoint to download: {error}")),
    }
    if settings.eval && !STOPPED.load(Ordering::Relaxed) {
        let evaluation = trainer.evaluate_async().await.map_err(in_keys)?;
        // trainer-cli's results.csv (`eval --out`).
        let csv = evaluation.csv();
        page.offer("results.csv", &JsValue::from_str(&csv));
        sink(evaluation.event());
    }
    Ok(())
}

/// The page's side of a run: `emit(line)`, `offer(name, text or bytes)`, `note(text)`. Its
/// handlers do not throw; if one did, the run would go on with that report lost.
#[wasm_bindgen]
pub struct Callbacks {
    emit: js_sys::Function,
    offer: js_sys::Function,
    note: js_sys::Function,
}

#[wasm_bindgen]
impl Callbacks {
    #[wasm_bindgen(constructor)]
    pub fn new(emit: js_sys::Function, offer: js_sys::Function, note: js_sys::Function) -> Self {
        Self { emit, offer, note }
    }
}

impl Callbacks {
    fn emit(&self, event: &Event) {
        let line =
            serde_json::to_string(event).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        let _ = self.emit.call1(&JsValue::NULL, &JsValue::from_str(&line));
    }

    fn offer(&self, name: &str, contents: &JsValue) {
        let _ = self
            .offer
            .call2(&JsValue::NULL, &JsValue::from_str(name), contents);
    }

    fn note(&self, text: &str) {
        let _ = self.note.call1(&JsValue::NULL, &JsValue::from_str(text));
    }
}

/// What errors call a checkpoint the user gave the page.
const UPLOADED: &str = "the checkpoint you chose";

/// The checkpoint to resume from: `{name, bytes}` objects, the files' names as a run offers
/// them; `None` when there are none (a new run).
fn checkpoint_files(files: &js_sys::Array) -> Result<Option<CheckpointFiles>, JsError> {
    if files.length() == 0 {
        return Ok(None);
    }
    let named = files
        .iter()
        .map(|file| keyed_bytes(&file, "name"))
        .collect::<Result<Vec<_>, _>>()?;
    let files = CheckpointFiles::from_named(named, std::path::Path::new(UPLOADED))?;
    Ok(Some(files))
}

/// The page's files as the engine takes them: each `{path, bytes}` copied into the
/// WebAssembly memory.
fn loaded_files(files: &js_sys::Array) -> Result<Vec<LoadedFile>, JsError> {
    files
        .iter()
        .map(|file| {
            let (path, bytes) = keyed_bytes(&file, "path")?;
            Ok(LoadedFile {
                path: path.into(),
                bytes: bytes.into(),
            })
        })
        .collect()
}

/// One `{<key>, bytes}` object the page sends (a file's name or path, a Uint8Array): the
/// key's text, and the bytes copied into the WebAssembly memory.
fn keyed_bytes(file: &JsValue, key: &str) -> Result<(String, Vec<u8>), JsError> {
    let field = |name: &str| js_sys::Reflect::get(file, &JsValue::from_str(name));
    let named = field(key)
        .ok()
        .and_then(|n| n.as_string())
        .ok_or_else(|| JsError::new(&format!("a file the page sent has no {key}")))?;
    let bytes = field("bytes")
        .ok()
        .and_then(|b| b.dyn_into::<js_sys::Uint8Array>().ok())
        .ok_or_else(|| JsError::new(&format!("{named}: the page did not read its bytes")))?;
    Ok((named, bytes.to_vec()))
}

/// The backend the page trains on, and why, as `--backend auto` explains its choice; a
/// WebGPU device is started here, as a browser requires, before anything uses it.
async fn choose(asked: WebBackend, webgpu: bool) -> Result<(BackendKind, String), JsError> {
    let cpu = cpu_words();
    match (asked, webgpu) {
        (WebBackend::Cpu, _) => Ok((BackendKind::Flex, format!("cpu asked for: {cpu}"))),
        (WebBackend::WebGpu, false) => Err(JsError::new(
            "this browser offers no WebGPU adapter (navigator.gpu); open the page with \
             backend=cpu, or enable WebGPU",
        )),
        (WebBackend::Auto, false) => Ok((
            BackendKind::Flex,
            format!("no WebGPU adapter in this browser: {cpu}"),
        )),
        (WebBackend::WebGpu | WebBackend::Auto, true) => {
            let adapter = start_webgpu().await?;
            let why = if asked == WebBackend::WebGpu {
                "webgpu asked for"
            } else {
                "the browser has WebGPU"
            };
            Ok((BackendKind::Wgpu, format!("{why}: {adapter}")))
        }
    }
}

/// The module with threads trains on the CPU alone (the worker loads it only for that).
#[cfg(not(target_feature = "atomics"))]
async fn start_webgpu() -> Result<String, JsError> {
    Ok(headroom_core::backend::start_webgpu().await?)
}

#[cfg(target_feature = "atomics")]
async fn start_webgpu() -> Result<String, JsError> {
    Err(JsError::new(
        "the page's module with threads trains on the CPU only; the worker loads the other \
         module for WebGPU (www/worker.js)",
    ))
}

/// The CPU in the backend's words: how many threads the worker's pool has, and, on one
/// thread in a page that is not cross-origin isolated, why.
fn cpu_words() -> String {
    let threads = rayon::current_num_threads();
    if threads > 1 {
        return format!("WebAssembly on {threads} CPU threads");
    }
    let isolated = js_sys::Reflect::get(&js_sys::global(), &"crossOriginIsolated".into())
        .is_ok_and(|v| v.is_truthy());
    if isolated {
        "WebAssembly on one CPU thread".into()
    } else {
        "WebAssembly on one CPU thread (threads need a cross-origin isolated page: docs/WEB.md)"
            .into()
    }
}

/// The budget the address gives; else, on the CPU, the room left in WebAssembly's memory
/// x the fraction every front-end takes, and on WebGPU a gibibyte, since WebGPU does not tell
/// a page its GPU's memory. Resolved by core, as every front-end's budget is.
fn budget(spec: &RunSpec, backend: BackendKind) -> Result<ResolvedBudget, JsError> {
    let source = match (spec.budget_source().map_err(|e| in_keys_of(&e))?, backend) {
        (BudgetSource::FreeMemory, BackendKind::Wgpu) => BudgetSource::Assumed {
            bytes: WEBGPU_DEFAULT_BUDGET,
            why: "WebGPU does not report the GPU's memory (the address' budget= gives another)",
        },
        (BudgetSource::FreeMemory, _) => {
            let used = wasm_bindgen::memory()
                .dyn_into::<js_sys::WebAssembly::Memory>()
                .map(|m| {
                    m.buffer()
                        .dyn_into::<js_sys::ArrayBuffer>()
                        .map_or(0, |b| b.byte_length() as u64)
                })
                .unwrap_or(0);
            BudgetSource::Room {
                free_bytes: WASM32_MEMORY_BYTES.saturating_sub(used),
                of: "WebAssembly memory of 4 GiB not yet taken by the page",
            }
        }
        (given, _) => given,
    };
    source
        .resolve(spec.memory.fraction, None)
        .map_err(|e| in_keys_of(&e))
}
