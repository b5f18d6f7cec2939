//! Names the commit trainer-cli is built from (`HEADROOM_COMMIT`), for the header of the run
//! files it writes (src/run_file.rs); nothing when it is not built from a git checkout.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    if let Some(commit) = git(&["rev-parse", "--short=7", "HEAD"]) {
        println!("cargo:rustc-env=HEADROOM_COMMIT={commit}");
    }
    // Again when HEAD moves (HEAD names the branch, the branch's ref its commit), and only
    // then: without these lines cargo would run this again on every change to the package.
    println!("cargo:rerun-if-changed=build.rs");
    for dir in [
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ]
    .into_iter()
    .flatten()
    {
        let dir = PathBuf::from(dir);
        for watched in ["HEAD", "refs/heads", "packed-refs"] {
            let path = dir.join(watched);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
