//! Puts the git commit into `nagare --version` and the reports' `version`
//! (NAGARE_GIT_HASH, empty outside a git checkout, e.g. a crate tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    let hash = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
    let suffix = if hash.is_empty() {
        String::new()
    } else {
        format!(" (git {hash})")
    };
    println!("cargo:rustc-env=NAGARE_VERSION_SUFFIX={suffix}");
    // Rebuilt when HEAD moves (a commit, a checkout), not on every build.
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
