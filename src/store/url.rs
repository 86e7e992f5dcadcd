//! The Redis URL forms redis-rs does not read, parsed by fleet itself (SPEC §2.7): Sentinel
//! (`redis+sentinel://`, `rediss+sentinel://`) and Cluster (`redis+cluster://`,
//! `rediss+cluster://`). Every other URL is handed to redis-rs as it is.
//!
//! Pure: no I/O. A reason given for a refusal never quotes the user info, so no password can
//! reach a message through it; the caller names the URL by its redacted form.

/// The default port of a Sentinel, when a host of the list names none.
pub const SENTINEL_PORT: u16 = 26379;
/// The default port of a Cluster node, when a host of the list names none.
pub const CLUSTER_PORT: u16 = 6379;

/// What a URL asks fleet to reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One server (`redis://`, `rediss://`, `redis+unix://`): redis-rs reads the URL.
    Single,
    Sentinel(SentinelUrl),
    Cluster(ClusterUrl),
}

/// `redis+sentinel://[user:password@]host:port[,host:port…]/MASTER_NAME[/db]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    /// `rediss+sentinel://`: TLS to the sentinels and to the primary.
    pub tls: bool,
    /// `user:password` (or `:password`, or `password`) as written, percent-escapes kept.
    pub userinfo: Option<String>,
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the primary under.
    pub master: String,
    pub db: i64,
}

/// `redis+cluster://[user:password@]host:port[,host:port…]`.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterUrl {
    pub tls: bool,
    pub userinfo: Option<String>,
    pub nodes: Vec<(String, u16)>,
}

// The user info never shows in a Debug (a test failure, a log of a value).
impl std::fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelUrl")
            .field("tls", &self.tls)
            .field("userinfo", &self.userinfo.as_ref().map(|_| "***"))
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .finish()
    }
}

impl std::fmt::Debug for ClusterUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterUrl")
            .field("tls", &self.tls)
            .field("userinfo", &self.userinfo.as_ref().map(|_| "***"))
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl SentinelUrl {
    /// The URL redis-rs reads for one server of this setup, a sentinel or the primary:
    /// `redis[s]://[userinfo@]host:port/db`, the user info as written.
    pub fn server_url(&self, host: &str, port: u16, userinfo: bool, db: i64) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        match (&self.userinfo, userinfo) {
            (Some(info), true) => format!("{scheme}://{info}@{host}:{port}/{db}"),
            _ => format!("{scheme}://{host}:{port}/{db}"),
        }
    }
}

/// Reads a URL's form: a Sentinel or Cluster URL in full, any other as `Single` (redis-rs
/// judges it). The error says what is wrong, never quoting the user info.
pub fn parse(url: &str) -> Result<Target, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(Target::Single);
    };
    let (tls, sentinel) = match scheme.to_ascii_lowercase().as_str() {
        "redis+sentinel" => (false, true),
        "rediss+sentinel" => (true, true),
        "redis+cluster" => (false, false),
        "rediss+cluster" => (true, false),
        _ => return Ok(Target::Single),
    };
    // The user info is everything up to the last `@`, as `connect::redact` reads it.
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (Some(rest[..at].to_owned()), &rest[at + 1..]),
        None => (None, rest),
    };
    if rest.contains(['?', '#']) {
        return Err("a Sentinel or Cluster URL takes no query or fragment".to_owned());
    }
    let (hosts, path) = match rest.split_once('/') {
        Some((hosts, path)) => (hosts, Some(path)),
        None => (rest, None),
    };
    let default_port = if sentinel {
        SENTINEL_PORT
    } else {
        CLUSTER_PORT
    };
    let hosts = host_list(hosts, default_port)?;
    if sentinel {
        let (master, db) = master_and_db(path)?;
        Ok(Target::Sentinel(SentinelUrl {
            tls,
            userinfo,
            sentinels: hosts,
            master,
            db,
        }))
    } else {
        if path.is_some_and(|p| !p.is_empty()) {
            return Err("a Cluster URL has no path (a cluster has one database)".to_owned());
        }
        Ok(Target::Cluster(ClusterUrl {
            tls,
            userinfo,
            nodes: hosts,
        }))
    }
}

/// `host:port[,host:port…]`, a host written `[v6]` where it is an IPv6 address.
fn host_list(text: &str, default_port: u16) -> Result<Vec<(String, u16)>, String> {
    if text.is_empty() {
        return Err("no host: name at least one host:port".to_owned());
    }
    text.split(',').map(|h| host(h, default_port)).collect()
}

fn host(text: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, rest)) => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("the host {text:?} is not host:port")),
            },
            None => return Err(format!("the host {text:?} has no closing ]")),
        },
        None => match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    let bad_char = |c: char| c.is_whitespace() || c.is_control() || "/@,[]".contains(c);
    if host.is_empty() || host.chars().any(bad_char) {
        return Err(format!(
            "the host {text:?} is not a host name or address (an empty entry between commas, \
             or a stray character)"
        ));
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(format!(
                    "the port of {text:?} is not a number from 1 to 65535"
                ));
            }
        },
    };
    Ok((host.to_owned(), port))
}

/// `/MASTER_NAME[/db]`.
fn master_and_db(path: Option<&str>) -> Result<(String, i64), String> {
    let missing = "no master name: the path names the primary as the sentinels monitor it \
                   (/mymaster)";
    let path = path.ok_or_else(|| missing.to_owned())?;
    let (master, db) = match path.split_once('/') {
        Some((master, "")) => (master, None),
        Some((master, db)) => (master, Some(db)),
        None => (path, None),
    };
    if master.is_empty() {
        return Err(missing.to_owned());
    }
    if master
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '%')
    {
        return Err(format!(
            "the master name {master:?} has a space, a control character or an escape"
        ));
    }
    let db = match db {
        None => 0,
        Some(text) => match text.parse::<i64>() {
            Ok(n) if n >= 0 => n,
            _ => {
                return Err(format!(
                    "the database {text:?} after the master name is not a number from 0 up"
                ));
            }
        },
    };
    Ok((master.to_owned(), db))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentinel(url: &str) -> SentinelUrl {
        match parse(url) {
            Ok(Target::Sentinel(s)) => s,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn a_sentinel_url_names_its_sentinels_its_master_and_its_database() {
        let s = sentinel("redis+sentinel://u:p/w@h1:1,h2,[::1]:3/mymaster/2");
        assert!(!s.tls);
        assert_eq!(s.userinfo.as_deref(), Some("u:p/w"));
        assert_eq!(
            s.sentinels,
            vec![
                ("h1".to_owned(), 1),
                ("h2".to_owned(), SENTINEL_PORT),
                ("::1".to_owned(), 3)
            ]
        );
        assert_eq!((s.master.as_str(), s.db), ("mymaster", 2));
        assert_eq!(s.server_url("::1", 7, true, 2), "redis://u:p/w@[::1]:7/2");
        assert_eq!(s.server_url("h", 7, false, 0), "redis://h:7/0");
        let s = sentinel("rediss+sentinel://h:26379/m/");
        assert!(s.tls);
        assert_eq!((s.userinfo, s.db), (None, 0));
        assert!(!format!("{:?}", sentinel("redis+sentinel://u:hunter2@h/m")).contains("hunter2"));
    }

    #[test]
    fn a_cluster_url_names_its_nodes() {
        match parse("rediss+cluster://u:p@a:7000,b") {
            Ok(Target::Cluster(c)) => {
                assert!(c.tls);
                assert_eq!(
                    c.nodes,
                    vec![("a".to_owned(), 7000), ("b".to_owned(), CLUSTER_PORT)]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_urls_are_left_to_redis_rs() {
        for url in [
            "redis://h:1",
            "rediss://h",
            "redis+unix:///s",
            "nonsense",
            "http://h",
        ] {
            assert_eq!(parse(url), Ok(Target::Single), "{url}");
        }
    }

    #[test]
    fn a_bad_sentinel_url_says_what_is_wrong_and_never_the_password() {
        for (url, said) in [
            ("redis+sentinel://h:1", "no master name"),
            ("redis+sentinel://h:1/", "no master name"),
            ("redis+sentinel:///m", "no host"),
            ("redis+sentinel://h:1,,h:2/m", "not a host name"),
            ("redis+sentinel://h:x/m", "port"),
            ("redis+sentinel://h:0/m", "port"),
            ("redis+sentinel://h:70000/m", "port"),
            ("redis+sentinel://[::1/m", "closing ]"),
            ("redis+sentinel://h/m/x", "database"),
            ("redis+sentinel://h/m/-1", "database"),
            ("redis+sentinel://h/m?db=1", "query"),
            ("redis+sentinel://u:hunter2@h/my master", "master name"),
            ("redis+cluster://h/0", "no path"),
        ] {
            let err = parse(url).expect_err(url);
            assert!(err.contains(said), "{url}: {err}");
            assert!(!err.contains("hunter2"), "{url}: {err}");
        }
    }
}
