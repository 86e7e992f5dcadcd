//! The files fleet is given, read to a bound (SPEC §7 S10): a path that names a file without end
//! (`/dev/zero`) is refused at once, exit 2, naming the file, its bound and what to do, through
//! the binary. Every run is bounded: a reader that read such a file whole would hang the test,
//! and is killed, instead of growing without end.

use crate::support;

use fleet_testing::Fixture;
use fleet_testing::fixture::{Driver, Group};
use support::run_fleet_bounded;

/// Runs `fleet args` against `server` and checks that it is refused, exit 2, saying `said`; and
/// that it wrote nothing on stdout.
async fn refused_saying(server: &fleet_testing::RedisServer, args: &[&str], said: &str) {
    let o = run_fleet_bounded(server, args).await;
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(said), "{args:?}: {stderr}");
    assert!(o.stdout.is_empty(), "{args:?}: nothing is written");
}

/// What a refused secret file says of itself, after its name.
const SECRET: &str = "holds more than 64 KiB, the most fleet reads of a token or password file: \
                      give the file that holds the secret alone, on its first line";

#[tokio::test]
async fn a_page_token_file_without_end_is_refused_at_start_naming_it() {
    let server = support::server();
    let dir = tempfile::tempdir().unwrap();
    let config = support::remote::serve_config(dir.path(), &server.url());
    let config = config.display().to_string();
    let start = [
        "serve",
        "--config",
        &config,
        "--metrics-addr",
        "127.0.0.1:0",
    ];
    let token = [&start[..], &["--ui-token-file", "/dev/zero"]].concat();
    let said = format!("--ui-token-file /dev/zero: /dev/zero {SECRET}");
    refused_saying(&server, &token, &said).await;
}

#[tokio::test]
async fn a_configuration_file_without_end_is_refused_naming_it() {
    let server = support::server();
    let said = "/dev/zero holds more than 64 MiB, the most fleet reads of a configuration file: \
                check that it is the configuration meant";
    for args in [
        &["serve", "--config", "/dev/zero"][..],
        &["acl", "--config", "/dev/zero", "--passwords", "/"],
    ] {
        refused_saying(&server, args, said).await;
    }
}

#[tokio::test]
async fn a_password_file_without_end_is_refused_naming_it() {
    let server = support::server();
    // The sentinels' password, read as the flags are parsed.
    let args = ["--sentinel-password-file", "/dev/zero", "state"];
    refused_saying(&server, &args, &format!("/dev/zero {SECRET}")).await;
    // A password of `fleet acl --passwords DIR`.
    let dir = tempfile::tempdir().unwrap();
    let config = support::remote::serve_config(dir.path(), &server.url());
    let passwords = dir.path().join("passwords");
    std::fs::create_dir(&passwords).unwrap();
    for user in ["fleet-viewer", "bench-01", "bench-02"] {
        std::fs::write(passwords.join(user), "pw\n").unwrap();
    }
    std::os::unix::fs::symlink("/dev/zero", passwords.join("fleet-controller")).unwrap();
    let (config, passwords) = (
        config.display().to_string(),
        passwords.display().to_string(),
    );
    let args = ["acl", "--config", &config, "--passwords", &passwords];
    let said = format!("{passwords}/fleet-controller {SECRET}");
    refused_saying(&server, &args, &said).await;
    // A BMC's password, read when `fleet serve` starts.
    let bmc = Driver::redfish("https://127.0.0.1:1")
        .username("admin")
        .password_file(std::path::Path::new("/dev/zero"))
        .insecure(true);
    let config = Fixture::new()
        .group(Group::new("pool-a").min(0).max(1).driver(bmc))
        .slots("pool-a", ["bench-01"])
        .write(dir.path());
    let config = config.display().to_string();
    let args = [
        "serve",
        "--config",
        &config,
        "--metrics-addr",
        "127.0.0.1:0",
    ];
    let said = format!("password_file /dev/zero: /dev/zero {SECRET}");
    refused_saying(&server, &args, &said).await;
}
