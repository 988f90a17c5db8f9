//! `kaas serve` as a process: a second process given a broker id that a
//! live process already serves on the same data directory refuses to start,
//! clearly; once the first is gone (kill -9 included) the id is free again.
#![cfg(all(unix, not(madsim)))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn serve(dir: &std::path::Path, broker_id: i32) -> (Child, u16) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--broker-id", &broker_id.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, port)
}

/// Waits (boundedly) until the broker accepts connections.
fn until_listening(child: &mut Child, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the first broker exited"
        );
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the broker never listened on {port}");
}

/// Waits (boundedly) for the process to exit and returns its output (the
/// log, where the reason is).
fn exit_output(child: Child) -> (bool, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut child = child;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            return (out.status.success(), text);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("the second broker did not exit");
}

#[test]
fn a_second_process_with_a_served_broker_id_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, port) = serve(dir.path(), 3);
    until_listening(&mut first, port);

    let (second, _) = serve(dir.path(), 3);
    let (ok, output) = exit_output(second);
    assert!(!ok, "the second process must fail");
    assert!(
        output.contains("broker id 3 is already served by another process"),
        "{output}"
    );

    // Another id on the same directory starts.
    let (mut other, other_port) = serve(dir.path(), 4);
    until_listening(&mut other, other_port);

    // kill -9 frees the id at once.
    first.kill().unwrap();
    first.wait().unwrap();
    let (mut again, again_port) = serve(dir.path(), 3);
    until_listening(&mut again, again_port);
    for mut c in [other, again] {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}
