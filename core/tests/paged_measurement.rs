//! A measured step on a device pool that carves pages sized to its largest allocation
//! (cubecl, here wgpu over Mesa's software Vulkan driver, which `.ci/run` installs). A run
//! makes its model after planning, in the pages planning grew; a measured step whose warm-up
//! grew the pages must be measured the same way, or the parameters left on the outgrown
//! pages are measured beside the new ones. Alone in its process: the pool is the test's.
#![cfg(feature = "wgpu")]

use headroom_core::plan::measure_step;
use headroom_core::precision::Precision;
use headroom_core::readback::block_on;
use headroom_core::speech::AsrConfig;
use headroom_core::task::TrainingTask;
use headroom_core::{BackendKind, Target};

#[test]
fn a_step_that_grows_the_pages_is_measured_as_one_in_them() {
    let target = Target::from(BackendKind::Wgpu);
    // The recogniser, as its planning by length measures it: an utterance of a quarter of
    // the longest, then two of the longest.
    let measure = |utterances, frames| {
        let task = AsrConfig::default()
            .at_length(frames)
            .expect("utterances of every length");
        let m = block_on(measure_step(
            target,
            &task,
            utterances,
            Precision::F32,
            false,
        ))
        .expect("a measured step on wgpu (lavapipe in CI)");
        {
            let pages = m.pages.expect("cubecl's pool reports its pages");
            (m, pages)
        }
    };
    let (_, small) = measure(1, 400);
    let (grown, g) = measure(2, 1_600);
    let (again, a) = measure(2, 1_600);
    assert!(
        g.page_bytes > small.page_bytes,
        "no page grew: {small:?} {g:?}"
    );
    // Measured again in the pages it grew, the step takes the pages it took the first
    // time, and beside them the same but for the runtime's few kilobytes of staging
    // buffers (an outgrown page held beside would be megabytes).
    assert_eq!((g.page_bytes, g.pages), (a.page_bytes, a.pages));
    assert!(
        grown.peak_bytes.abs_diff(again.peak_bytes) < 1 << 20,
        "{grown:?}\n{again:?}"
    );
}
