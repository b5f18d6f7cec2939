//! Running the GPU probe in a child process with a timeout.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::GpuReport;

/// How to start a child that runs [`super::gpus::probe_here`] and prints its
/// [`GpuReport`] as JSON on stdout: usually the running binary with a hidden subcommand.
#[derive(Debug, Clone)]
pub struct ChildProbe {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub timeout: Duration,
}

impl ChildProbe {
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
