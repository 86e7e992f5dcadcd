//! The listener's pure parts: the caps' rule, the Host check, the `--ui-host` names.

use std::net::IpAddr;

use axum::http::Request;

use super::{Hosts, Limits, host_name, misdirected, peer_of};

#[test]
fn the_caps_are_a_quarter_and_an_eighth_of_the_descriptors_under_their_ceilings() {
    let rows = [
        // nofile, connections, streams, per peer
        (256, 64, 32, 8),
        (1_024, 256, 128, 32),
        (4_096, 1_024, 512, 128),
        (8_192, 2_048, 1_000, 256),
        (65_536, 2_048, 1_000, 256),
        (524_288, 2_048, 1_000, 256),
        (16, 4, 2, 4),
        (4, 1, 1, 1),
    ];
    for (nofile, connections, streams, per_peer) in rows {
        assert_eq!(
            Limits::of(nofile),
            Limits {
                nofile,
                connections,
                streams,
                per_peer
            },
            "nofile {nofile}"
        );
        assert!(
            streams < connections || connections == 1,
            "a stream is a connection too"
        );
    }
}

#[test]
fn the_providers_caps_are_a_sixteenth_and_an_eighth_of_that_under_their_ceiling() {
    let rows = [
        // nofile, connections, per peer
        (1_024, 64, 8),
        (256, 16, 4),
        (16, 1, 1),
        (4_096, 256, 32),
        (65_536, 256, 32),
    ];
    for (nofile, connections, per_peer) in rows {
        assert_eq!(
            Limits::provider(nofile),
            Limits {
                nofile,
                connections,
                streams: 0,
                per_peer
            },
            "nofile {nofile}"
        );
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn a_host_is_allowed_when_it_is_the_connections_own_address_or_a_configured_name() {
    let hosts = Hosts::new(vec!["fleet.example.com".to_owned(), "10.9.8.7".to_owned()]);
    let rows: &[(&str, &str, bool)] = &[
        // Host (without its port), the connection's local address, allowed
        ("127.0.0.1", "127.0.0.1", true),
        ("localhost", "127.0.0.1", true),
        ("LOCALHOST", "127.0.0.1", true),
        ("localhost.", "127.0.0.1", true),
        ("localhost", "::1", true),
        ("localhost", "::ffff:127.0.0.1", true),
        ("[::1]", "::1", true),
        ("10.0.0.5", "10.0.0.5", true),
        ("10.0.0.5", "::ffff:10.0.0.5", true),
        // A listener on 0.0.0.0 answers the address the peer reached it at, not another.
        ("10.0.0.6", "10.0.0.5", false),
        ("127.0.0.1", "10.0.0.5", false),
        ("localhost", "10.0.0.5", false),
        ("fleet.example.com", "10.0.0.5", true),
        ("Fleet.Example.COM", "10.0.0.5", true),
        ("10.9.8.7", "127.0.0.1", true),
        ("evil.example", "127.0.0.1", false),
        ("fleet.example.com.evil.example", "127.0.0.1", false),
        ("localhost.evil.example", "127.0.0.1", false),
        ("", "127.0.0.1", false),
    ];
    for (host, local, allowed) in rows {
        assert_eq!(
            hosts.allow(host, ip(local)),
            *allowed,
            "Host {host:?} on {local}"
        );
    }
}

fn request(target: &str, hosts: &[&str]) -> Request<()> {
    let mut request = Request::builder().uri(target);
    for host in hosts {
        request = request.header("host", *host);
    }
    request.body(()).unwrap()
}

#[test]
fn a_request_is_misdirected_by_its_host_header_or_its_absolute_target() {
    let hosts = Hosts::new(vec!["fleet.example.com".to_owned()]);
    let local = ip("127.0.0.1");
    let refused =
        |target: &str, named: &[&str]| misdirected(&request(target, named), local, &hosts);
    assert_eq!(refused("/", &["127.0.0.1:9464"]), None);
    assert_eq!(refused("/events", &["localhost:8080"]), None, "any port");
    assert_eq!(refused("/metrics", &["fleet.example.com:9464"]), None);
    assert_eq!(refused("/", &[]), None, "no Host: no browser");
    assert_eq!(
        refused("/", &["evil.example:9464"]).as_deref(),
        Some("evil.example:9464")
    );
    assert_eq!(
        refused("/metrics", &["evil.example"]).as_deref(),
        Some("evil.example")
    );
    assert_eq!(refused("/healthz", &["evil.example"]), None, "a constant");
    assert_eq!(
        refused("/readyz", &["evil.example"]).as_deref(),
        Some("evil.example")
    );
    assert!(refused("/", &["localhost", "evil.example"]).is_some());
    assert!(refused("/", &["127.0.0.1@evil.example"]).is_some());
    assert!(refused("/", &["evil.example@127.0.0.1"]).is_some());
    assert!(refused("/", &["127.0.0.1:x"]).is_some());
    // The absolute form's authority is the host, whatever the header says.
    assert!(refused("http://evil.example/", &["127.0.0.1"]).is_some());
    assert_eq!(refused("http://localhost:1/", &["evil.example"]), None);
}

#[test]
fn a_ui_host_is_a_name_or_an_address_without_a_port() {
    assert_eq!(host_name("Fleet.Example.com").unwrap(), "fleet.example.com");
    assert_eq!(host_name("fleet-ui").unwrap(), "fleet-ui");
    assert_eq!(host_name("10.0.0.5").unwrap(), "10.0.0.5");
    assert_eq!(host_name("[fd00::1]").unwrap(), "[fd00::1]");
    assert_eq!(host_name("FD00::1").unwrap(), "[fd00::1]");
    for bad in [
        "",
        "fleet:9464",
        "a b",
        "http://fleet",
        "fleet..example",
        "é.example",
    ] {
        let e = host_name(bad).unwrap_err();
        assert!(e.contains("without a port"), "{bad:?}: {e}");
    }
}

#[test]
fn a_peer_is_its_ipv4_address_or_its_ipv6_64() {
    let rows = [
        ("10.0.0.5", "10.0.0.5"),
        ("::ffff:10.0.0.5", "10.0.0.5"),
        ("127.0.0.2", "127.0.0.2"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::"),
        ("2001:db8:1:3::1", "2001:db8:1:3::"),
        ("::1", "::"),
    ];
    for (addr, peer) in rows {
        assert_eq!(peer_of(ip(addr)), ip(peer), "{addr}");
    }
}
