//! cubecl reports what a wgpu device refuses (a buffer binding past the adapter's limit, say)
//! by panicking on the device's service thread (`DSU-…`/`DSD-…`), then catches that panic and
//! returns it as the step's error, which Headroom says in words (a dry-run or calibration
//! halves the size, a what-if falls back). The default hook would first print the panic's
//! text on the terminal. Here such a panic is one log line instead, unless `RUST_BACKTRACE`
//! asks for the full report; a panic on any other thread keeps the default hook.

use std::panic::PanicHookInfo;

/// Installs the hook; call once, after logging is set up.
pub fn quiet() {
    if std::env::var_os("RUST_BACKTRACE").is_some() {
        return;
    }
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if on_device_thread(std::thread::current().name()) {
            tracing::warn!("the device refused work: {}", one_line(info));
        } else {
            default(info);
        }
    }));
}

/// cubecl's device service threads: `DS`, the stage (`U`pstream, `D`ownstream), `-`.
fn on_device_thread(name: Option<&str>) -> bool {
    name.is_some_and(|n| n.starts_with("DSU-") || n.starts_with("DSD-"))
}

/// The panic's message on one line: wgpu's report spreads its cause over several
/// ("Validation Error", "Caused by:", the call, the limit it passed).
fn one_line(info: &PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    joined(&text)
}

fn joined(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && *line != "Caused by:")
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::{joined, on_device_thread};

    #[test]
    fn wgpus_report_reads_on_one_line() {
        let report = "wgpu error: Validation Error\n\nCaused by:\n  In Device::create_bind_group\n    \
                      Buffer binding 0 range 199065600 exceeds limit 134217728\n";
        assert_eq!(
            joined(report),
            "wgpu error: Validation Error; In Device::create_bind_group; Buffer binding 0 range \
             199065600 exceeds limit 134217728"
        );
    }

    #[test]
    fn only_cubecls_device_threads_are_quieted() {
        assert!(on_device_thread(Some("DSD-3-0")));
        assert!(on_device_thread(Some("DSU-1-2")));
        assert!(!on_device_thread(Some("main")));
        assert!(!on_device_thread(Some("DSX-1")));
        assert!(!on_device_thread(None));
    }
}
