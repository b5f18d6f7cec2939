//! Pause and stop at a step boundary. A native front-end sets the run's flags from another
//! thread while the run's thread sleeps through a pause. A web page's worker has one thread
//! (WebAssembly here has no others), and the page's Pause and Stop arrive as messages that
//! only the browser's event loop delivers: so on the web the run hands its thread back to
//! the event loop at every boundary, and waits through a pause on the browser's timer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::RunOptions;

/// How often a paused run looks at its flags again.
const PAUSE_POLL_MS: u32 = 50;

/// Whether the run stops before step `step + 1`; waits here while it is paused.
pub(super) async fn stop_before_next(options: &RunOptions, step: u64) -> bool {
    let set =
        |flag: &Option<Arc<AtomicBool>>| flag.as_ref().is_some_and(|f| f.load(Ordering::Relaxed));
    let_messages_in().await;
    while set(&options.pause) && !set(&options.stop) {
        wait_ms(PAUSE_POLL_MS).await;
    }
    options.stop_after.is_some_and(|n| step >= n) || set(&options.stop)
}

/// On the web, the event loop runs the page's messages (a zero timer: a promise alone
/// would keep the thread); natively the flags are read as they are.
async fn let_messages_in() {
    #[cfg(target_arch = "wasm32")]
    wait_ms(0).await;
}

#[cfg(not(target_arch = "wasm32"))]
async fn wait_ms(ms: u32) {
    std::thread::sleep(std::time::Duration::from_millis(ms.into()));
}

/// The global `setTimeout` (a window's or a worker's), awaited. Where there is none (not a
/// browser), it returns at once rather than hang the run.
#[cfg(target_arch = "wasm32")]
async fn wait_ms(ms: u32) {
    use wasm_bindgen::{JsCast, JsValue};
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        let global = js_sys::global();
        let scheduled = js_sys::Reflect::get(&global, &JsValue::from_str("setTimeout"))
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
            .is_some_and(|set_timeout| {
                set_timeout
                    .call2(&global, &resolve, &JsValue::from(ms))
                    .is_ok()
            });
        if !scheduled {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::block_on;

    fn flag(on: bool) -> Option<Arc<AtomicBool>> {
        Some(Arc::new(AtomicBool::new(on)))
    }

    #[test]
    fn a_stop_ends_a_pause_and_the_run() {
        let options = RunOptions {
            pause: flag(true),
            stop: flag(true),
            ..RunOptions::default()
        };
        assert!(block_on(stop_before_next(&options, 3)));
    }

    #[test]
    fn a_pause_waits_until_it_is_lifted() {
        let pause = Arc::new(AtomicBool::new(true));
        let options = RunOptions {
            pause: Some(pause.clone()),
            ..RunOptions::default()
        };
        // Before the lifting thread starts: taken after, a wait of the full 200 ms could
        // read shorter.
        let started = std::time::Instant::now();
        let lift = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            pause.store(false, Ordering::Relaxed);
        });
        assert!(!block_on(stop_before_next(&options, 3)));
        assert!(started.elapsed() >= std::time::Duration::from_millis(200));
        lift.join().unwrap();
    }

    #[test]
    fn stop_after_counts_steps_done() {
        let options = RunOptions {
            stop_after: Some(5),
            ..RunOptions::default()
        };
        assert!(!block_on(stop_before_next(&options, 4)));
        assert!(block_on(stop_before_next(&options, 5)));
    }
}
