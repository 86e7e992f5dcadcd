//! A real headless Chromium, driven over WebDriver: for the tests of the live page that `fleet
//! serve` serves.
//!
//! `Browser::start` starts a private `chromedriver` on a free loopback port, waits until it says
//! it is ready, and opens one headless Chromium session with a fresh profile in a temporary
//! directory. The driver runs in a process group of its own, and dropping the handle kills that
//! whole group, so no browser outlives its test even when the test panics. A missing `chromium`
//! or `chromedriver` is a panic with an install hint: tests fail on it, never skip.
//!
//! The methods panic on a WebDriver failure, with what was asked: a test helper has nothing
//! better to do with the error. Only `wait_for` returns a `Result`, because a test may expect a
//! wait to time out. Every call is bounded (`CALL_BOUND`), as every await in a test must be.
//!
//! It is not a page object: it knows nothing of fleet's page, only CSS selectors and scripts.

use std::fmt::Debug;
use std::future::Future;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Names another chromedriver binary (the default is `chromedriver`, then `chromium.driver`).
pub const DRIVER_ENV: &str = "FLEET_CHROMEDRIVER";
/// Names another browser binary (the default is `chromium`, then `chromium-browser`).
pub const CHROMIUM_ENV: &str = "FLEET_CHROMIUM";

/// How long chromedriver may take to answer `/status` with `ready`, and a session to open.
const START_BOUND: Duration = Duration::from_secs(30);
/// How long one WebDriver call may take (a page load included) before the test fails.
const CALL_BOUND: Duration = Duration::from_secs(30);
/// How often `wait_for` and the start look again: polling another process, nothing wakes us.
const POLL: Duration = Duration::from_millis(50);
/// The window: wide enough for a table of slots, and the size of every screenshot.
const WINDOW: (u32, u32) = (1280, 900);

const INSTALL_HINT: &str = "install them (apt-get install chromium chromium-driver, or run \
                            scripts/ensure-deps.sh)";

/// A headless Chromium session and the chromedriver that drives it.
pub struct Browser {
    /// `None` once `close` has ended the session.
    client: Option<Client>,
    driver: Child,
    /// chromedriver's port on 127.0.0.1.
    port: u16,
    /// The profile (`--user-data-dir`) and chromedriver's log; removed on drop.
    dir: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and opens a headless session; panics, with an install hint, when
    /// chromium or chromedriver is missing.
    pub async fn start() -> Browser {
        let driver_bin = find_binary(DRIVER_ENV, &["chromedriver", "chromium.driver"])
            .unwrap_or_else(|| {
                panic!("chromedriver is not on PATH (nor named by {DRIVER_ENV}): {INSTALL_HINT}")
            });
        let chromium =
            find_binary(CHROMIUM_ENV, &["chromium", "chromium-browser"]).unwrap_or_else(|| {
                panic!("chromium is not on PATH (nor named by {CHROMIUM_ENV}): {INSTALL_HINT}")
            });
        let dir = tempfile::Builder::new()
            .prefix("fleet-browser-")
            .tempdir()
            .expect("creating the browser's temporary directory");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("chromedriver.log"))
            .expect("creating chromedriver's log");
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cloning the log's handle"))
            .stderr(log)
            // Its own process group, so that drop kills chromium with it (see `Drop`).
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}: {INSTALL_HINT}", driver_bin.display()));
        let mut browser = Browser {
            client: None,
            driver,
            port,
            dir,
        };
        browser.wait_until_ready().await;
        let mut builder = ClientBuilder::new(HttpConnector::new());
        builder.capabilities(capabilities(&chromium, &browser.dir.path().join("profile")));
        let url = format!("http://127.0.0.1:{port}");
        let client = match tokio::time::timeout(START_BOUND, builder.connect(&url)).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => panic!("opening a chromium session: {e}\n{}", browser.log()),
            Err(_) => panic!(
                "no chromium session within {START_BOUND:?}\n{}",
                browser.log()
            ),
        };
        browser.client = Some(client);
        browser
    }

    /// Polls chromedriver's `/status` until it says `ready`, within `START_BOUND`.
    async fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + START_BOUND;
        loop {
            if let Some(status) = self
                .driver
                .try_wait()
                .expect("reading chromedriver's status")
            {
                panic!(
                    "chromedriver exited ({status}) before it was ready\n{}",
                    self.log()
                );
            }
            let status = driver_request(self.port, "GET", "/status", None).await;
            if status.is_some_and(|s| s["value"]["ready"] == Value::Bool(true)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver was not ready within {START_BOUND:?}\n{}",
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("the browser was closed")
    }

    /// Loads `url` and waits for its `load` event.
    pub async fn goto(&self, url: &str) {
        bounded(format!("goto {url}"), self.client().goto(url)).await;
    }

    /// The visible text of the first element that matches `css` (as a user reads it: hidden
    /// elements give nothing, table cells are separated by whitespace).
    pub async fn text_of(&self, css: &str) -> String {
        let element = bounded(format!("find {css}"), self.client().find(Locator::Css(css))).await;
        bounded(format!("text of {css}"), element.text()).await
    }

    /// The attribute `name` of the first element that matches `css`; `None` when it has none.
    pub async fn attr_of(&self, css: &str, name: &str) -> Option<String> {
        let element = bounded(format!("find {css}"), self.client().find(Locator::Css(css))).await;
        bounded(format!("attribute {name} of {css}"), element.attr(name)).await
    }

    /// Waits until an element matches `css` and its visible text satisfies `ready`, polling
    /// within `bound`: the page updates itself, so the test cannot be told when. The text that
    /// satisfied it, or an error with the last text seen.
    pub async fn wait_for(
        &self,
        css: &str,
        ready: impl Fn(&str) -> bool,
        bound: Duration,
    ) -> Result<String, String> {
        let deadline = Instant::now() + bound;
        let mut last = None;
        loop {
            // A missing element is not a failure yet: the page may not have drawn it.
            if let Ok(Ok(element)) =
                tokio::time::timeout(CALL_BOUND, self.client().find(Locator::Css(css))).await
                && let Ok(Ok(text)) = tokio::time::timeout(CALL_BOUND, element.text()).await
            {
                if ready(&text) {
                    return Ok(text);
                }
                last = Some(text);
            }
            if Instant::now() >= deadline {
                return Err(match last {
                    Some(text) => format!("{css} still reads {text:?} after {bound:?}"),
                    None => format!("no element matches {css} after {bound:?}"),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Runs `js` as the body of a function in the page, with `args` as `arguments`, and returns
    /// what it returns. A returned promise is awaited (WebDriver's Execute Script), so a test can
    /// send a request from inside the page, with the page's origin and its own headers:
    /// `return fetch(arguments[0], {method: 'POST', headers: {...}}).then(r => r.status)`.
    pub async fn execute(&self, js: &str, args: Vec<Value>) -> Value {
        bounded("execute a script", self.client().execute(js, args)).await
    }

    /// Saves a PNG of the viewport at `path`; returns its size in bytes.
    pub async fn screenshot(&self, path: &Path) -> usize {
        let png = bounded("screenshot", self.client().screenshot()).await;
        std::fs::write(path, &png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        png.len()
    }

    /// Emulates `prefers-color-scheme: dark` (or light), as a user's system setting would, with
    /// the DevTools command `Emulation.setEmulatedMedia`. It holds for the session, across
    /// navigations.
    pub async fn set_dark(&self, dark: bool) {
        let scheme = if dark { "dark" } else { "light" };
        self.devtools(
            "Emulation.setEmulatedMedia",
            json!({ "features": [{ "name": "prefers-color-scheme", "value": scheme }] }),
        )
        .await;
    }

    /// Emulates a phone's screen (390 × 844 CSS pixels at twice the density, a touch device),
    /// or gives the window back its own size, with `Emulation.setDeviceMetricsOverride`. It
    /// holds for the session, across navigations.
    pub async fn set_phone(&self, phone: bool) {
        if phone {
            self.devtools(
                "Emulation.setDeviceMetricsOverride",
                json!({ "width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true }),
            )
            .await;
        } else {
            self.devtools("Emulation.clearDeviceMetricsOverride", json!({}))
                .await;
        }
    }

    /// One DevTools command, through chromedriver's `goog/cdp/execute`.
    async fn devtools(&self, cmd: &str, params: Value) {
        let session = bounded("the session's id", self.client().session_id())
            .await
            .expect("an open session has an id");
        let body = json!({ "cmd": cmd, "params": params });
        // fantoccini does not name chromedriver's extension commands, and its hook for them
        // (`WebDriverCompatibleCommand`) takes a `url::Url`, a crate fleet does not depend on:
        // one plain request to chromedriver is less.
        let path = format!("/session/{session}/goog/cdp/execute");
        let reply = driver_request(self.port, "POST", &path, Some(&body)).await;
        assert!(
            reply.as_ref().is_some_and(|r| r["value"].is_object()),
            "browser: {cmd} {body}: {reply:?}"
        );
    }

    /// Ends the session (chromium quits) and stops chromedriver. Dropping does the same by
    /// killing, so `close` is only the polite way, which also reports a failure to quit.
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            bounded("closing the session", client.close()).await;
        }
    }

    /// chromedriver's log so far, for a failure message.
    fn log(&self) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("chromedriver.log")).unwrap_or_default();
        format!("chromedriver's log:\n{text}")
    }
}

impl Drop for Browser {
    /// Kills chromedriver's whole process group: chromium and its helpers are in it, and a
    /// killed chromedriver would not stop them itself. (Chromium's crash reporter starts a
    /// session of its own, out of the group; it exits when chromium does.)
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.driver.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

/// The session's capabilities: headless chromium of the given binary, a fresh profile, a fixed
/// window, and page loads and scripts bounded by the browser as well.
fn capabilities(chromium: &Path, profile: &Path) -> fantoccini::wd::Capabilities {
    let (width, height) = WINDOW;
    let args = [
        "--headless=new".to_owned(),
        // Tests run as root in containers, where chromium's sandbox cannot start.
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        // A container's /dev/shm is often 64 MB, too small for chromium's shared memory.
        "--disable-dev-shm-usage".to_owned(),
        format!("--window-size={width},{height}"),
        format!("--user-data-dir={}", profile.display()),
        "--no-first-run".to_owned(),
        "--no-default-browser-check".to_owned(),
    ];
    let bound = CALL_BOUND.as_millis() as u64;
    let mut caps = fantoccini::wd::Capabilities::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": chromium, "args": args }),
    );
    caps.insert(
        "timeouts".into(),
        json!({ "pageLoad": bound, "script": bound }),
    );
    caps
}

/// Awaits a WebDriver call within `CALL_BOUND`; panics with `what` on an error or a timeout.
async fn bounded<T, E: Debug>(
    what: impl Into<String>,
    call: impl Future<Output = Result<T, E>>,
) -> T {
    let what = what.into();
    match tokio::time::timeout(CALL_BOUND, call).await {
        Ok(Ok(value)) => value,
        Ok(Err(e)) => panic!("browser: {what}: {e:?}"),
        Err(_) => panic!("browser: {what}: no answer within {CALL_BOUND:?}"),
    }
}

/// One request to chromedriver on `port`: its JSON reply, or `None` when it does not answer
/// (yet) within two seconds. For what the WebDriver client cannot do: `/status` before there is
/// a session, and chromedriver's own DevTools command. (A raw socket is not enough: chromedriver
/// says `Connection: close` and keeps the connection open.)
async fn driver_request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Option<Value> {
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1:{port}{path}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::from(body.map(Value::to_string).unwrap_or_default()))
        .expect("a well-formed request");
    let ask = async {
        let reply = client.request(request).await.ok()?;
        let bytes = reply.into_body().collect().await.ok()?.to_bytes();
        serde_json::from_slice(&bytes).ok()
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

/// A loopback port that was free a moment ago (chromedriver takes a port number, not a socket).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("the port's address").port()
}

/// The binary named by `env`, or the first of `names` on PATH.
fn find_binary(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}
