//! Running the GPU probe in a child process with a timeout, and the child's side: one
//! protocol for every front-end binary (the binary runs itself with [`CHILD_COMMAND`] and
//! the settings as flags, and the child prints its [`GpuReport`] as JSON).

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::gpus::{self, ProbeSettings};
use super::{GpuReport, MachineReport};

/// The hidden first argument that makes a Headroom binary probe GPUs and print JSON.
pub const CHILD_COMMAND: &str = "__probe-gpus";

/// The child's argument that gives the allocation probe's cap in bytes.
const ALLOCATION_CAP: &str = "allocation-cap=";
/// The child's argument that asks it to probe software adapters too.
const SOFTWARE_ADAPTERS: &str = "software-adapters";

/// How long a probe waits for the GPU drivers before it reports them as not answering.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Probes the machine, the GPUs in a child process of the running binary, so that a driver
/// that hangs or crashes costs a finding, not the program.
pub fn probe_machine(timeout: Duration, settings: ProbeSettings) -> MachineReport {
    let child = ChildProbe::of_this_program(timeout, settings);
    super::probe_machine(child.as_ref(), settings)
}

/// The child's side, when `args` (the program's arguments after its name) start with
/// [`CHILD_COMMAND`]: the settings the parent asked for.
pub fn child_settings(mut args: impl Iterator<Item = String>) -> Option<ProbeSettings> {
    if args.next().as_deref() != Some(CHILD_COMMAND) {
        return None;
    }
    // The parent and the child are one binary: nothing but these words is ever passed.
    let words: Vec<String> = args.collect();
    let allocation_cap = words
        .iter()
        .find_map(|word| word.strip_prefix(ALLOCATION_CAP)?.parse().ok());
    Some(ProbeSettings {
        allocation_cap,
        software_adapters: words.iter().any(|word| word == SOFTWARE_ADAPTERS),
    })
}

/// Probes the GPUs here and prints the report as one line of JSON: the child's answer.
pub fn answer(settings: ProbeSettings) -> Result<(), serde_json::Error> {
    println!("{}", serde_json::to_string(&gpus::probe_here(settings))?);
    Ok(())
}

/// How to start a child that runs [`super::gpus::probe_here`] and prints its
/// [`GpuReport`] as JSON on stdout: usually the running binary with a hidden subcommand.
#[derive(Debug, Clone)]
pub struct ChildProbe {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub timeout: Duration,
}

impl ChildProbe {
    /// The running binary as the child, asked for `settings`; `None` where the binary's
    /// path cannot be known.
    pub fn of_this_program(timeout: Duration, settings: ProbeSettings) -> Option<Self> {
        // Words, not flags: the child's arguments are this protocol's, never a user's.
        let mut args = vec![CHILD_COMMAND.to_string()];
        if let Some(cap) = settings.allocation_cap {
            args.push(format!("{ALLOCATION_CAP}{cap}"));
        }
        if settings.software_adapters {
            args.push(SOFTWARE_ADAPTERS.to_string());
        }
        let program = std::env::current_exe().ok()?;
        Some(Self {
            program,
            args,
            timeout,
        })
    }

    pub fn run(&self) -> Result<GpuReport, String> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.program.display()))?;
        let mut stdout = child.stdout.take().ok_or("the child has no stdout")?;
        // Read on a thread so a chatty child cannot block on a full pipe while we wait.
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        });
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "a GPU driver did not answer within {:.0} s; the probe was stopped",
                        self.timeout.as_secs_f64()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("cannot wait for the GPU probe: {e}")),
            }
        };
        let out = reader.join().unwrap_or_default();
        if !status.success() {
            return Err(format!("the GPU probe crashed ({status}), a driver fault"));
        }
        serde_json::from_str(out.trim())
            .map_err(|e| format!("the GPU probe's answer is not readable: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64) -> ChildProbe {
        ChildProbe {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    /// What the parent passes is what the child reads.
    #[test]
    fn the_child_reads_the_settings_the_parent_passes() {
        for settings in [
            ProbeSettings::default(),
            ProbeSettings {
                allocation_cap: Some(1 << 30),
                software_adapters: true,
            },
        ] {
            let child = ChildProbe::of_this_program(TIMEOUT, settings).unwrap();
            assert_eq!(child_settings(child.args.into_iter()), Some(settings));
        }
        assert_eq!(child_settings(["train".to_string()].into_iter()), None);
        assert_eq!(child_settings(std::iter::empty()), None);
    }

    #[test]
    fn a_hanging_driver_costs_a_line_not_the_program() {
        let started = Instant::now();
        let err = sh("sleep 30", 300).run().unwrap_err();
        assert!(err.contains("did not answer"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_crashing_driver_is_reported() {
        let err = sh("kill -SEGV $$", 5_000).run().unwrap_err();
        assert!(err.contains("crashed"), "{err}");
    }

    #[test]
    fn a_child_answer_is_read() {
        let report = sh(
            r#"echo '{"devices":[],"findings":["no CUDA device or driver"]}'"#,
            5_000,
        )
        .run()
        .unwrap();
        assert_eq!(
            report.findings,
            vec!["no CUDA device or driver".to_string()]
        );
    }
}
