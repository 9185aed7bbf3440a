//! Embeds the git revision the `duet` binary is built from (DUET_GIT_REV), so bench JSON names
//! the code that ran even where the binary runs in another checkout (the GPU machine's copy of
//! the tree keeps an older HEAD). Reruns when HEAD or the branch it points to moves.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
    }
    if let Some(rev) = git(&["rev-parse", "--short", "HEAD"]) {
        println!("cargo:rustc-env=DUET_GIT_REV={rev}");
    }
}
