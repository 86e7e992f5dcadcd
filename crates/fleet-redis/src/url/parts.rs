//! The parts of a Redis URL, each read as the `url` crate and redis-rs will read it (SPEC §2.7):
//! the user info, a host and its port, a one-server URL's database, query and fragment, a unix
//! socket's path. Pure: no I/O; a refusal never quotes the user info or a password.

use super::{CLUSTER_PORT, Form, Part, Refusal, quoted, refuse};

/// `user:password`, `:password` or `user`, as written before the last `@`. What the `url` crate
/// would read otherwise (`/`, `?`, `#` end its host part) or could not decode is refused, and
/// nothing of it is quoted.
pub(super) fn check_userinfo(info: &str) -> Result<(), Refusal> {
    match info.split_once(':') {
        Some((user, password)) => {
            check_secret(user, Part::User)?;
            check_secret(password, Part::Password)
        }
        None => check_secret(info, Part::User),
    }
}

fn check_secret(text: &str, part: Part) -> Result<(), Refusal> {
    for c in text.chars() {
        let escaped = match c {
            '/' => "%2F",
            '?' => "%3F",
            '#' => "%23",
            _ => continue,
        };
        return refuse(
            part,
            format!(
                "{part} holds an unescaped `{c}`, which would end the host part of the URL: \
                 percent-encode it as {escaped} (and any `%` itself as %25)"
            ),
        );
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return refuse(
            part,
            format!(
                "{part} holds a space or a control character: percent-encode it (a space is %20)"
            ),
        );
    }
    match percent_decode(text) {
        None => refuse(
            part,
            format!("{part} holds a `%` that begins no escape: write a `%` itself as %25"),
        ),
        Some(bytes) if std::str::from_utf8(&bytes).is_err() => refuse(
            part,
            format!(
                "{part}'s escapes do not decode to UTF-8 text: percent-encode its bytes as UTF-8"
            ),
        ),
        Some(_) => Ok(()),
    }
}

/// `%XY` escapes decoded; `None` when a `%` is not followed by two hex digits.
fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let (high, low) = (hex(bytes.get(i + 1))?, hex(bytes.get(i + 2))?);
            out.push(u8::try_from(high * 16 + low).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// What follows the user info of a `redis://` or `rediss://` URL: `host[:port][/db][?protocol=…]`.
pub(super) fn plain(rest: &str) -> Result<(), Refusal> {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(end);
    if authority.is_empty() {
        return refuse(
            Part::Host,
            "host is missing: write redis://host:port (redis://127.0.0.1:6379)",
        );
    }
    host(authority, CLUSTER_PORT)?;
    if rest.contains('#') {
        return refuse(
            Part::Fragment,
            "fragment (#…) is not read: fleet always checks a TLS server's certificate (give \
             its CA with --redis-ca), and a `#` in a password is written %23",
        );
    }
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    let db = path.strip_prefix('/').unwrap_or(path);
    let db = db.strip_suffix('/').unwrap_or(db);
    if !db.is_empty() && !is_number(db) {
        return refuse(
            Part::Database,
            format!(
                "database {} is not a number from 0 up: write redis://host:port/N (0 when left out)",
                quoted(&format!("/{db}"))
            ),
        );
    }
    match query {
        Some(query) => query_params(query, Form::Plain),
        None => Ok(()),
    }
}

/// Whether `text` is a number from 0 up that fits a database index.
pub(super) fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && text.parse::<i64>().is_ok()
}

/// What follows `redis+unix://`: `/path/to/redis.sock[?db=N&user=U&pass=P&protocol=…]`.
pub(super) fn unix(rest: &str) -> Result<(), Refusal> {
    if rest.contains('#') {
        return refuse(
            Part::Fragment,
            "fragment (#…) is not read: a `#` in the socket path or a password is written %23",
        );
    }
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    // The `url` crate reads a file URL's host as `localhost` or none.
    let path = path.strip_prefix("localhost").unwrap_or(path);
    if !path.starts_with('/') {
        return refuse(
            Part::SocketPath,
            "socket path is not absolute: write redis+unix:///path/to/redis.sock (three slashes)",
        );
    }
    if path.ends_with('/') {
        return refuse(
            Part::SocketPath,
            "socket path names a directory: write the socket file's path \
             (redis+unix:///path/to/redis.sock)",
        );
    }
    match query {
        Some(query) => query_params(query, Form::Unix),
        None => Ok(()),
    }
}

/// The query of a one-server URL. redis-rs reads `protocol` from any, and `db`, `user` and
/// `pass` from a unix socket's, and ignores every other name: a `db=` on a `redis://` URL, or a
/// `password=`, would be silently dropped, so each is refused naming where it goes.
fn query_params(query: &str, form: Form) -> Result<(), Refusal> {
    let unix = form == Form::Unix;
    let mut seen: Vec<String> = Vec::new();
    // Once a password has been given, what follows may be a piece of it cut at an unescaped
    // `&`: it is not quoted.
    let mut after_secret = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = form_decode(name).unwrap_or_else(|| name.to_owned());
        match query_param(&name, value, unix)? {
            Param::Read => {}
            Param::Secret => after_secret = true,
            Param::Unknown if after_secret => {
                return refuse(
                    Part::QueryParameter,
                    "query parameter after pass= is not one fleet reads: a `&` in the password \
                     is written %26",
                );
            }
            Param::Unknown => {
                let takes = if unix {
                    "db, user, pass and protocol"
                } else {
                    "protocol"
                };
                return refuse(
                    Part::QueryParameter,
                    format!(
                        "query parameter {} is not one fleet reads: this form takes {takes} \
                         (names are lowercase)",
                        quoted(&name)
                    ),
                );
            }
        }
        if seen.contains(&name) {
            return refuse(
                Part::QueryParameter,
                format!("query parameter {name}= is given twice: give it once"),
            );
        }
        seen.push(name);
    }
    Ok(())
}

/// What a query parameter is to the form (`unix`: a `redis+unix://` URL's query).
enum Param {
    /// Read, and valid.
    Read,
    /// A password, valid: what follows it is not quoted.
    Secret,
    /// No name the form reads.
    Unknown,
}

/// Checks one query parameter the form reads, and refuses one it would silently drop that is
/// meant for somewhere else (a `db=` on `redis://`: the path), naming where it goes.
fn query_param(name: &str, value: &str, unix: bool) -> Result<Param, Refusal> {
    match (name, unix) {
        ("db", true) if !is_number(value) => refuse(
            Part::Database,
            format!("database (db={}) is not a number from 0 up", quoted(value)),
        ),
        ("db", true) => Ok(Param::Read),
        ("user", true) => check_query_secret(value, Part::User, "user=").map(|()| Param::Read),
        ("pass", true) => {
            check_query_secret(value, Part::Password, "pass=").map(|()| Param::Secret)
        }
        ("password", true) => refuse(
            Part::Password,
            "password is given as password=, which redis+unix:// does not read: write pass=",
        ),
        ("protocol", _) if !matches!(value, "2" | "3" | "resp2" | "resp3") => refuse(
            Part::QueryParameter,
            "query parameter protocol= takes resp2 or resp3",
        ),
        ("protocol", _) => Ok(Param::Read),
        ("db", false) => refuse(
            Part::Database,
            "database is given as db=, which redis:// does not read: write it as the path \
             (redis://host:port/N)",
        ),
        ("pass" | "password", false) => refuse(
            Part::Password,
            "password is given in the query, which redis:// does not read: write it before the \
             host (redis://:password@host, or redis://user:password@host)",
        ),
        ("user", false) => refuse(
            Part::User,
            "user is given in the query, which redis:// does not read: write it before the host \
             (redis://user:password@host)",
        ),
        _ => Ok(Param::Unknown),
    }
}

/// A query's user or password: redis-rs decodes it as a form does, so a `+` would read as a space
/// and a stray `%` as itself. Neither is quoted.
fn check_query_secret(value: &str, part: Part, given: &str) -> Result<(), Refusal> {
    if value.contains('+') {
        return refuse(
            part,
            format!(
                "{part} ({given}) holds a `+`, which a query reads as a space: write a `+` as \
                 %2B (a space as %20)"
            ),
        );
    }
    check_secret(value, part)
}

/// A query name as a form decodes it (`+` a space, `%XY` a byte); `None` if it is not UTF-8 or
/// has a stray `%`.
fn form_decode(text: &str) -> Option<String> {
    let bytes = percent_decode(&text.replace('+', " "))?;
    String::from_utf8(bytes).ok()
}

/// One `host[:port]`: a name of letters, digits, `-`, `.` and `_`, an IPv4 address, or an IPv6
/// address in brackets; never a wildcard address, which names no server (redis-rs refuses it
/// only when it builds a client, which for a Sentinel's primary is in the middle of a search).
pub(super) fn host(text: &str, default_port: u16) -> Result<(String, u16), Refusal> {
    let (host, port, v6) = match text.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None, true),
            Some((host, rest)) => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port), true),
                None => {
                    return refuse(
                        Part::Host,
                        format!("host {} is not [address]:port", quoted(text)),
                    );
                }
            },
            None => {
                return refuse(
                    Part::Host,
                    format!(
                        "host {} has no closing ]: write an IPv6 address as [::1]:6379",
                        quoted(text)
                    ),
                );
            }
        },
        None => match text.split_once(':') {
            Some((host, port)) => (host, Some(port), false),
            None => (text, None, false),
        },
    };
    let wildcard = if v6 {
        match host.parse::<std::net::Ipv6Addr>() {
            Ok(addr) => addr.is_unspecified(),
            Err(_) => {
                return refuse(
                    Part::Host,
                    format!("host {} is not an IPv6 address", quoted(host)),
                );
            }
        }
    } else {
        let name = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
        if host.is_empty() || !host.chars().all(name) {
            return refuse(
                Part::Host,
                format!(
                    "host {} is not a host name or address (letters, digits, `-`, `.` and `_`, \
                     or an IPv6 address in brackets, [::1]:6379; not an empty entry between \
                     commas)",
                    quoted(host)
                ),
            );
        }
        host == "0.0.0.0"
    };
    if wildcard {
        return refuse(
            Part::Host,
            format!(
                "host {} is a wildcard (listening) address, which names no server: name the \
                 server's own address (127.0.0.1 on this machine)",
                quoted(host)
            ),
        );
    }
    Ok((host.to_owned(), port_of(port, host, default_port)?))
}

/// A host's port: digits from 1 to 65535, or `default_port` where the host names none.
fn port_of(port: Option<&str>, host: &str, default_port: u16) -> Result<u16, Refusal> {
    let Some(p) = port else {
        return Ok(default_port);
    };
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => refuse(
            Part::Port,
            format!(
                "port of host {} is not a number from 1 to 65535 (leave out the `:` for \
                 {default_port})",
                quoted(host)
            ),
        ),
    }
}
