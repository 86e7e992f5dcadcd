//! Every Redis URL form fleet takes, read by fleet itself before anything connects (SPEC §2.7):
//! one server (`redis://`, `rediss://`, `redis+unix://`), Sentinel (`redis+sentinel://`,
//! `rediss+sentinel://`) and Cluster (`redis+cluster://`, `rediss+cluster://`). A one-server URL
//! that passes is then handed to redis-rs as it is; a Sentinel or Cluster URL is followed by fleet
//! (`sentinel`, `cluster`).
//!
//! Why fleet reads the one-server forms too: redis-rs reads a URL through the `url` crate, which
//! ends the host part at the first `/`, `?` or `#`, while fleet's redaction ends the user info at
//! the last `@` (`connect::redact`). A password with an unescaped `/` thus read as another
//! host, another port or a path, and failed late and in other words (a Sentinel URL waited the
//! whole `--timeout` and said `TLS failed`). Here every part is checked, and a refusal names the
//! part and the fix.
//!
//! Pure: no I/O. A refusal never quotes the user info or a password parameter, so no password
//! can reach a message through it; the caller names the URL by its redacted form.

/// The default port of a Sentinel, when a host of the list names none.
pub const SENTINEL_PORT: u16 = 26379;
/// The default port of a Cluster node, when a host of the list names none.
pub const CLUSTER_PORT: u16 = 6379;
/// The longest URL fleet reads: far more than any list of hosts needs, and a bound on what a
/// hostile environment variable can make fleet parse and print.
pub const MAX_URL_LEN: usize = 4096;
/// The longest piece of a URL a refusal quotes.
const MAX_QUOTED: usize = 64;

/// What a URL asks fleet to reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One server (`redis://`, `rediss://`, `redis+unix://`), checked here: redis-rs reads the
    /// URL.
    Single,
    Sentinel(SentinelUrl),
    Cluster(ClusterUrl),
}

/// The part of a URL a refusal is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The URL as a whole (its length).
    Whole,
    Scheme,
    User,
    Password,
    Host,
    Port,
    Database,
    /// A Sentinel URL's master name: the service the sentinels monitor.
    ServiceName,
    /// A Cluster URL's path, which it must not have.
    Path,
    /// A `redis+unix://` URL's socket path.
    SocketPath,
    QueryParameter,
    Fragment,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::Whole => "URL",
            Part::Scheme => "scheme",
            Part::User => "user",
            Part::Password => "password",
            Part::Host => "host",
            Part::Port => "port",
            Part::Database => "database",
            Part::ServiceName => "service name",
            Part::Path => "path",
            Part::SocketPath => "socket path",
            Part::QueryParameter => "query parameter",
            Part::Fragment => "fragment",
        })
    }
}

/// Why a URL is refused: the part that is wrong, and what is wrong with it and how to write it,
/// in words that never quote a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub part: Part,
    pub why: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {}", self.why)
    }
}

impl std::error::Error for Refusal {}

fn refuse<T>(part: Part, why: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal {
        part,
        why: why.into(),
    })
}

/// A piece of the URL for a message, cut to a bounded length. Never given the user info.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        Some((at, _)) => format!("{:?}…", &text[..at]),
        None => format!("{text:?}"),
    }
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

mod parts;

/// The forms fleet takes, for the scheme's refusal.
const FORMS: &str = "redis://, rediss://, redis+unix://, redis+sentinel://, rediss+sentinel://, \
                     redis+cluster:// or rediss+cluster://";

/// Which reader a scheme asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `redis://`, `rediss://`.
    Plain,
    /// `redis+unix://`.
    Unix,
    Sentinel,
    Cluster,
}

/// Reads a URL of any form fleet takes, every part of it, without connecting: a Sentinel or
/// Cluster URL into what fleet follows, a one-server URL into `Single` once it is known to read
/// as fleet reads it (redis-rs then builds its client). A refusal names the part and the fix,
/// never quoting the user info or a password (SPEC §2.7).
pub fn parse(url: &str) -> Result<Target, Refusal> {
    if url.len() > MAX_URL_LEN {
        return refuse(
            Part::Whole,
            format!(
                "URL is {} bytes long, and fleet reads Redis URLs of up to {MAX_URL_LEN}",
                url.len()
            ),
        );
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return refuse(
            Part::Scheme,
            format!("scheme is missing: a Redis URL starts with {FORMS} (redis://127.0.0.1:6379)"),
        );
    };
    let (form, tls) = form_of(scheme)?;
    if form == Form::Unix {
        parts::unix(rest)?;
        return Ok(Target::Single);
    }
    // The user info is everything up to the last `@`, as `connect::redact` reads it; that it
    // holds none of `/`, `?`, `#` makes the `url` crate, which ends the host part at the first
    // of them, read the same user info (`parts::check_userinfo`).
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    if let Some(info) = userinfo {
        parts::check_userinfo(info)?;
    }
    if form == Form::Plain {
        parts::plain(rest)?;
        return Ok(Target::Single);
    }
    followed(form == Form::Sentinel, tls, userinfo, rest)
}

/// The form and TLS a scheme asks for, in any case.
fn form_of(scheme: &str) -> Result<(Form, bool), Refusal> {
    Ok(match scheme.to_ascii_lowercase().as_str() {
        "redis" => (Form::Plain, false),
        "rediss" => (Form::Plain, true),
        "redis+unix" => (Form::Unix, false),
        "redis+sentinel" => (Form::Sentinel, false),
        "rediss+sentinel" => (Form::Sentinel, true),
        "redis+cluster" => (Form::Cluster, false),
        "rediss+cluster" => (Form::Cluster, true),
        _ => {
            // A scheme is quoted only when it looks like one: text before a stray `://` could
            // be anything.
            let looks_like_one = scheme.len() <= 20
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            let named = if looks_like_one {
                format!("scheme {} is", quoted(scheme))
            } else {
                "scheme is".to_owned()
            };
            return refuse(
                Part::Scheme,
                format!("{named} not one fleet takes: use {FORMS}"),
            );
        }
    })
}

/// What follows the user info of a Sentinel URL (`sentinel`) or a Cluster URL: the hosts, and
/// the master name and database, or no path.
fn followed(
    sentinel: bool,
    tls: bool,
    userinfo: Option<&str>,
    rest: &str,
) -> Result<Target, Refusal> {
    let kind = if sentinel { "a Sentinel" } else { "a Cluster" };
    if rest.contains('#') {
        return refuse(
            Part::Fragment,
            format!(
                "fragment (#…) is not read: {kind} URL takes none (a `#` in a password is written %23)"
            ),
        );
    }
    if rest.contains('?') {
        return refuse(
            Part::QueryParameter,
            format!(
                "query parameters (?…) are not read: {kind} URL takes none (the database of a \
                 Sentinel URL is the path's /N after the master name; a `?` in a password is \
                 written %3F)"
            ),
        );
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
    let userinfo = userinfo.map(str::to_owned);
    if sentinel {
        let (master, db) = master_and_db(path)?;
        return Ok(Target::Sentinel(SentinelUrl {
            tls,
            userinfo,
            sentinels: hosts,
            master,
            db,
        }));
    }
    if path.is_some_and(|p| !p.is_empty()) {
        return refuse(
            Part::Path,
            "path is not read: a Cluster URL has no path (a cluster has one database)",
        );
    }
    Ok(Target::Cluster(ClusterUrl {
        tls,
        userinfo,
        nodes: hosts,
    }))
}

/// `host:port[,host:port…]`, a host written `[v6]` where it is an IPv6 address.
fn host_list(text: &str, default_port: u16) -> Result<Vec<(String, u16)>, Refusal> {
    if text.is_empty() {
        return refuse(
            Part::Host,
            "host is missing (no host): name at least one host:port",
        );
    }
    text.split(',')
        .map(|h| parts::host(h, default_port))
        .collect()
}

/// `/MASTER_NAME[/db]`.
fn master_and_db(path: Option<&str>) -> Result<(String, i64), Refusal> {
    let missing = || {
        refuse(
            Part::ServiceName,
            "service name is missing (no master name): the path names the primary as the \
             sentinels monitor it (redis+sentinel://host:26379/mymaster)",
        )
    };
    let Some(path) = path else {
        return missing();
    };
    let (master, db) = match path.split_once('/') {
        Some((master, "")) => (master, None),
        Some((master, db)) => (master, Some(db)),
        None => (path, None),
    };
    if master.is_empty() {
        return missing();
    }
    if master
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '%')
    {
        return refuse(
            Part::ServiceName,
            format!(
                "service name (the master name) {} has a space, a control character or an \
                 escape: write it as the sentinels' configuration does",
                quoted(master)
            ),
        );
    }
    let db = match db {
        None => 0,
        Some(text) if parts::is_number(text) => text.parse::<i64>().unwrap_or_default(),
        Some(text) => {
            return refuse(
                Part::Database,
                format!(
                    "database {} after the master name is not a number from 0 up",
                    quoted(text)
                ),
            );
        }
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
        let s = sentinel("redis+sentinel://u:p%2Fw@h1:1,h2,[::1]:3/mymaster/2");
        assert!(!s.tls);
        assert_eq!(s.userinfo.as_deref(), Some("u:p%2Fw"));
        assert_eq!(
            s.sentinels,
            vec![
                ("h1".to_owned(), 1),
                ("h2".to_owned(), SENTINEL_PORT),
                ("::1".to_owned(), 3)
            ]
        );
        assert_eq!((s.master.as_str(), s.db), ("mymaster", 2));
        assert_eq!(s.server_url("::1", 7, true, 2), "redis://u:p%2Fw@[::1]:7/2");
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
    fn a_good_one_server_url_is_left_to_redis_rs() {
        for url in [
            "redis://h:1",
            "redis://h",
            "REDIS://h:1/",
            "rediss://h",
            "redis://u:p@h:1/0",
            "redis://:p@h:1/15/",
            "redis://u@h",
            "redis://@h",
            "redis://u:p@ss:w%2Frd@h:1",
            "redis://u:%F0%9F%94%91@h",
            "redis://u:p%25@h",
            "redis://[::1]:6379/2",
            "redis://my_host.example-1.org:6380",
            "redis://h:1/0?protocol=resp3",
            "redis+unix:///s",
            "redis+unix:///tmp/r@1.sock",
            "redis+unix://localhost/tmp/r.sock",
            "redis+unix:///tmp/r.sock?db=1&user=u&pass=p%2Bw&protocol=2",
            "redis+unix:///tmp/r.sock?pass=a%26b&db=2",
        ] {
            assert_eq!(parse(url), Ok(Target::Single), "{url}");
        }
    }

    /// Every URL form fleet takes, with each part wrong in each way it can be: the refusal
    /// names that part, says the fix where there is one, and never quotes the password
    /// (`hunter2`), whole or in pieces.
    #[test]
    fn a_bad_url_of_any_form_names_the_part_and_never_the_password() {
        use Part::*;
        let long = format!("redis://h:1/0?protocol={}", "3".repeat(MAX_URL_LEN));
        let table: &[(&str, Part, &str)] = &[
            ("127.0.0.1:6379", Scheme, "a Redis URL starts with redis://"),
            ("u:hunter2@nowhere", Scheme, "missing"),
            ("http://h:1", Scheme, "\"http\" is not one fleet takes"),
            ("unix:///tmp/r.sock", Scheme, "redis+unix://"),
            ("u:hunter2://h", Scheme, "not one fleet takes"),
            (&long, Whole, "fleet reads Redis URLs of up to 4096"),
            // The user info, in every network form.
            ("redis://u:hun/ter2@h:1", Password, "%2F"),
            ("rediss://u:hun?ter2@h:1", Password, "%3F"),
            ("redis://u:hun#ter2@h:1", Password, "%23"),
            ("redis://u:hun ter2@h:1", Password, "%20"),
            ("redis://u:hunter2%@h:1", Password, "%25"),
            ("redis://u:hunter2%zz@h:1", Password, "%25"),
            ("redis://u:hunter2%ff@h:1", Password, "UTF-8"),
            ("redis://us/er:hunter2@h:1", User, "%2F"),
            ("redis://hun/ter2@h:1", User, "%2F"),
            (
                "redis+sentinel://:hun/ter2@h:26379/mymaster",
                Password,
                "%2F",
            ),
            ("rediss+sentinel://u:hun?ter2@h/mymaster", Password, "%3F"),
            ("redis+cluster://u:hun/ter2@a:7000,b:7001", Password, "%2F"),
            ("rediss+cluster://u:hunter2%@a", Password, "%25"),
            // Hosts and ports.
            ("redis://", Host, "missing"),
            ("redis://u:hunter2@", Host, "missing"),
            ("redis://u:hunter2@:6379", Host, "not a host name"),
            ("redis://h^x:1", Host, "not a host name"),
            ("redis://0.0.0.0:6379", Host, "wildcard"),
            ("redis://[::]:6379", Host, "wildcard"),
            ("redis://[::1:6379", Host, "closing ]"),
            ("redis://[nope]:1", Host, "not an IPv6 address"),
            ("redis://[::1]x", Host, "[address]:port"),
            ("redis://u:hunter2@h:notaport", Port, "from 1 to 65535"),
            ("redis://h:0", Port, "from 1 to 65535"),
            ("redis://h:70000", Port, "from 1 to 65535"),
            ("redis://h:+1", Port, "from 1 to 65535"),
            ("redis://h:", Port, "leave out the `:`"),
            ("redis+sentinel:///m", Host, "no host"),
            ("redis+sentinel://u:hunter2@/m", Host, "no host"),
            ("redis+sentinel://h:1,,h:2/m", Host, "not a host name"),
            ("redis+sentinel://0.0.0.0/m", Host, "wildcard"),
            ("redis+sentinel://h:x/m", Port, "port"),
            ("redis+sentinel://h:0/m", Port, "port"),
            ("redis+sentinel://h:70000/m", Port, "port"),
            ("redis+sentinel://[::1/m", Host, "closing ]"),
            ("rediss+cluster://u:hunter2@h:x", Port, "port"),
            ("redis+cluster://a,b c", Host, "not a host name"),
            // Databases, service names, paths.
            ("redis://h:1/x", Database, "redis://host:port/N"),
            ("redis://h:1/-1", Database, "from 0 up"),
            ("redis://h:1/0/1", Database, "from 0 up"),
            ("redis+sentinel://h/m/x", Database, "database"),
            ("redis+sentinel://h/m/-1", Database, "database"),
            ("redis+sentinel://h:1", ServiceName, "no master name"),
            (
                "redis+sentinel://u:hunter2@h:1/",
                ServiceName,
                "no master name",
            ),
            (
                "redis+sentinel://u:hunter2@h/my master",
                ServiceName,
                "master name",
            ),
            ("redis+sentinel://h/my%20master", ServiceName, "escape"),
            ("redis+cluster://h/0", Path, "no path"),
            ("redis+unix://tmp/r.sock", SocketPath, "three slashes"),
            ("redis+unix://", SocketPath, "not absolute"),
            ("redis+unix:///tmp/", SocketPath, "directory"),
            // Query parameters and fragments.
            ("redis+sentinel://h/m?db=1", QueryParameter, "query"),
            ("redis+cluster://h?x=1", QueryParameter, "takes none"),
            ("redis+sentinel://h/m#x", Fragment, "%23"),
            ("redis://h:1/0?db=3", Database, "path (redis://host:port/N)"),
            (
                "redis://h:1?password=hunter2",
                Password,
                "redis://:password@host",
            ),
            (
                "redis://h:1?pass=hunter2",
                Password,
                "redis://:password@host",
            ),
            ("redis://h:1?user=u", User, "redis://user:password@host"),
            (
                "redis://h:1?timeout=3",
                QueryParameter,
                "\"timeout\" is not one fleet reads",
            ),
            (
                "redis://h:1?protocol=resp9",
                QueryParameter,
                "resp2 or resp3",
            ),
            ("redis://h:1?protocol=3&protocol=2", QueryParameter, "twice"),
            ("rediss://h:1#insecure", Fragment, "--redis-ca"),
            ("redis://h:1#x", Fragment, "%23"),
            ("redis+unix:///s?db=x", Database, "from 0 up"),
            ("redis+unix:///s?db=-1", Database, "from 0 up"),
            ("redis+unix:///s?password=hunter2", Password, "pass="),
            ("redis+unix:///s?pass=hun+ter2", Password, "%2B"),
            ("redis+unix:///s?pass=hunter2%", Password, "%25"),
            ("redis+unix:///s?user=u+v", User, "%2B"),
            ("redis+unix:///s?pass=hun&ter2=x", QueryParameter, "%26"),
            ("redis+unix:///s?pass=hun&ter2", QueryParameter, "%26"),
            ("redis+unix:///s?DB=1", QueryParameter, "lowercase"),
            ("redis+unix:///s?db=1&db=2", QueryParameter, "twice"),
            ("redis+unix:///s?pass=hunter2#x", Fragment, "%23"),
        ];
        for (url, part, said) in table {
            let refusal = parse(url).expect_err(url);
            let text = refusal.to_string();
            assert_eq!(refusal.part, *part, "{url}: {text}");
            assert!(text.contains(said), "{url}: {text}");
            assert!(
                text.contains(&part.to_string()),
                "{url}: the message names its part, {part}: {text}"
            );
            for secret in ["hunter2", "hun/ter2", "hun", "ter2"] {
                assert!(!text.contains(secret), "{url}: {text}");
            }
            assert!(text.len() < 400, "{url}: a bounded message: {text}");
        }
    }

    // Hostile input: a URL of megabytes, or of thousands of hosts, is refused or read at once,
    // and what a refusal quotes of it stays short.
    #[test]
    fn a_hostile_url_is_refused_in_bounded_time_and_words() {
        let started = std::time::Instant::now();
        let huge = format!("redis://u:{}@h:1", "p".repeat(1 << 20));
        let refusal = parse(&huge).expect_err("a megabyte");
        assert_eq!(refusal.part, Part::Whole);
        assert!(refusal.to_string().len() < 200, "{refusal}");
        let hosts = vec!["h"; 3000].join(",");
        let many = format!("redis+cluster://{hosts}");
        assert!(matches!(parse(&many), Err(r) if r.part == Part::Whole));
        let within = format!("redis+cluster://{}", vec!["h:1"; 1000].join(","));
        assert!(matches!(parse(&within), Ok(Target::Cluster(c)) if c.nodes.len() == 1000));
        let long_host = format!("redis://{}^:1", "h".repeat(4000));
        let refusal = parse(&long_host).expect_err("a bad long host");
        assert!(refusal.to_string().len() < 400, "{refusal}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
