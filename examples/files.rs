//! Moves files to and from a remote host over SFTP: upload, list, download with a checksum,
//! swiftide's file commands, and `stream_files` over a git repository with a `.gitignore`.
//!
//! Run this example with:
//!
//! ```sh
//! cargo run --ignore-rust-version --example files
//! ```
//!
//! With no arguments it starts a throwaway local sshd (the native testbed; needs
//! `openssh-server`). To use a real host, name it as in `~/.ssh/config` (user, port, keys and
//! known_hosts come from there). Everything happens in a fresh `mktemp -d` directory, removed
//! at the end:
//!
//! ```sh
//! cargo run --ignore-rust-version --example files -- build-1
//! ```

use std::{path::PathBuf, time::Instant};

use data_encoding::HEXLOWER;
use futures::StreamExt;
use sha1::{Digest, Sha1};
use swiftide_core::{Command, ToolExecutor};
use swiftide_ssh_executor::SshExecutor;
use swiftide_ssh_testbed::Testbed;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the testbed alive for the whole run: dropping it stops sshd.
    let (builder, _testbed) = match std::env::args().nth(1) {
        Some(alias) => (SshExecutor::from_ssh_config(&alias)?, None),
        None => {
            let testbed = Testbed::start()?;
            let builder = SshExecutor::builder()
                .host(testbed.host())
                .port(testbed.port())
                .user(testbed.user())
                .private_key_file(testbed.private_key_path())
                .known_hosts_file(testbed.known_hosts_path());
            (builder, Some(testbed))
        }
    };
    let executor = builder.build().await?;
    let shell = |command: &str, dir: &PathBuf| Command::shell(command).with_current_dir(dir);
    let dir = executor.exec_cmd(&Command::shell("mktemp -d")).await?;
    let dir = PathBuf::from(dir.to_string().trim());
    println!("working in {}:{}", executor.host(), dir.display());

    // Upload: a generated binary file, and a text file in a directory that does not exist yet.
    let mut blob = vec![0u8; 8 << 20];
    rand::fill(&mut blob[..]);
    let started = Instant::now();
    executor
        .write_file_bytes(&dir.join("blob.bin"), &blob)
        .await?;
    println!("uploaded 8 MiB in {:.2?}", started.elapsed());
    let notes = dir.join("notes/hello.txt");
    executor
        .write_file_bytes(&notes, b"hello over SFTP\n")
        .await?;

    // List: entries with their own metadata, and the metadata of one path.
    for entry in executor.list_dir(&dir).await? {
        let meta = &entry.metadata;
        let kind = format!("{:?}", meta.file_type);
        println!(
            "  {kind:<5} {:o} {:>8}  {}",
            meta.permissions, meta.size, entry.name
        );
    }
    let meta = executor.metadata(&notes).await?;
    let (mode, uid) = (meta.permissions, meta.uid.unwrap_or_default());
    println!(
        "notes/hello.txt: {} bytes, mode {mode:o}, uid {uid}",
        meta.size
    );

    // Download and compare checksums: local, downloaded, and the remote's own `sha1sum`.
    let started = Instant::now();
    let downloaded = executor.read_file_bytes(&dir.join("blob.bin")).await?;
    println!(
        "downloaded {} bytes in {:.2?}",
        downloaded.len(),
        started.elapsed()
    );
    let sha1 = |bytes: &[u8]| HEXLOWER.encode(&Sha1::digest(bytes));
    let remote = executor.exec_cmd(&shell("sha1sum blob.bin", &dir)).await?;
    println!("sha1 sent       {}", sha1(&blob));
    println!("sha1 received   {}", sha1(&downloaded));
    println!("remote sha1sum  {}", remote.to_string().trim());
    assert!(blob == downloaded, "the download differs from the upload");

    // The same over swiftide's commands (what agent tools use); relative to `current_dir`.
    let write = Command::write_file("config.toml", "[server]\nport = 8080\n");
    executor.exec_cmd(&write.with_current_dir(&dir)).await?;
    let read = Command::read_file("config.toml").with_current_dir(&dir);
    print!("ReadFile config.toml:\n{}", executor.exec_cmd(&read).await?);
    let missing = Command::read_file("missing.toml").with_current_dir(&dir);
    if let Err(error) = executor.exec_cmd(&missing).await {
        println!("ReadFile missing.toml: {error}");
    }

    // stream_files: LocalExecutor's selection (hidden files, .gitignore in a git repository).
    let repo = dir.join("repo");
    let tree = [
        (".gitignore", "target/\n*.log\n"),
        (".env", "TOKEN=secret\n"),
        ("README.md", "# demo\n"),
        ("src/main.rs", "fn main() {\n    println!(\"hi\");\n}\n"),
        ("src/lib.rs", "pub fn answer() -> u32 {\n    42\n}\n"),
        ("build.log", "compiling...\n"),
        ("target/debug/generated.rs", "// generated\n"),
    ];
    for (path, content) in tree {
        executor
            .write_file_bytes(&repo.join(path), content.as_bytes())
            .await?;
    }
    executor.exec_cmd(&shell("git init -q", &repo)).await?;
    let find = shell("find . -type f ! -path './.git/*' | sort", &repo);
    print!("files in repo/:\n{}", executor.exec_cmd(&find).await?);
    for extensions in [None, Some(vec!["rs".to_owned()])] {
        println!("stream_files(repo, {extensions:?}) yields:");
        let mut nodes = executor.stream_files(&repo, extensions).await?;
        while let Some(node) = nodes.next().await {
            let node = node?;
            println!("  {:>3} bytes  {}", node.original_size, node.path.display());
        }
    }

    executor.remove_dir_all(&dir).await?;
    println!(
        "removed {}: exists = {}",
        dir.display(),
        executor.exists(&dir).await?
    );
    Ok(())
}
