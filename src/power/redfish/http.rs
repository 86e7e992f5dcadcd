//! One HTTP/1.1 exchange with a BMC at a time, each on its own connection.
//!
//! Built on hyper's connection-level client over tokio-rustls (the crates kube and tonic already
//! bring), not on a pooling client: a BMC is asked one thing at a time (a mutex per BMC), each
//! request says `Connection: close` and gets a fresh connection (BMCs keep few sockets and
//! mishandle reused ones), and every failure is told apart where it happens: the TCP connect
//! and a TLS I/O error are "unreachable", a certificate refused is a configuration problem that
//! says what was presented and which field to set (which certificate is trusted is `trust`'s).
//! Basic auth on every request, so no session is ever opened on the BMC and none can leak (BMCs
//! run out of sessions). No I/O happens outside `exchange`.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{ACCEPT, AUTHORIZATION, CONNECTION, CONTENT_TYPE, HOST, HeaderValue, LOCATION};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::power::redfish::target::{Endpoint, RedfishTarget, TargetError};
use crate::power::redfish::trust::{self, Verifier};

/// The most fleet reads of an answer: a ComputerSystem is a few kilobytes.
const MAX_BODY: usize = 1 << 20;

/// The connection to one BMC: where it is, how its certificate is checked, and the
/// `Authorization` header (marked sensitive; the transport has no `Debug`).
pub struct Transport {
    endpoint: Endpoint,
    tls: Option<TlsConnector>,
    authorization: HeaderValue,
    /// One request at a time per BMC: many BMCs serve one request at a time and drop
    /// the rest.
    one_at_a_time: tokio::sync::Mutex<()>,
}

/// An answer: its status, `Location` (for a redirect's error) and body.
pub struct Reply {
    pub status: u16,
    pub location: Option<String>,
    pub body: Bytes,
}

/// Why an exchange got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer: refused, reset, timed out, or the TLS connection broke.
    Unreachable(String),
    /// An answer fleet cannot use, or a TLS peer fleet must not trust; retrying will not help.
    Protocol(String),
}

impl Transport {
    /// The transport for a checked target: reads the CA file (or takes the system's roots).
    pub fn new(target: &RedfishTarget, endpoint: Endpoint) -> Result<Transport, TargetError> {
        let tls = match endpoint.tls {
            false => None,
            true => Some(TlsConnector::from(Arc::new(client_config(
                target, &endpoint,
            )?))),
        };
        let credentials = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            target.username,
            target.password.expose()
        ));
        let mut authorization = HeaderValue::try_from(format!("Basic {credentials}"))
            .expect("base64 is visible ASCII, which a header value takes");
        authorization.set_sensitive(true);
        Ok(Transport {
            endpoint,
            tls,
            authorization,
            one_at_a_time: tokio::sync::Mutex::new(()),
        })
    }

    /// One request and its whole answer within `bound` (the wait for the BMC's mutex included).
    /// `json` is sent as `Content-Type: application/json` with no charset: some BMCs refuse one.
    pub async fn exchange(
        &self,
        method: Method,
        path: &str,
        json: Option<String>,
        bound: Duration,
    ) -> Result<Reply, Failure> {
        match tokio::time::timeout(bound, self.exchange_unbounded(method, path, json)).await {
            Ok(reply) => reply,
            Err(_) => Err(Failure::Unreachable(format!(
                "no answer within {:.1}s",
                bound.as_secs_f64()
            ))),
        }
    }

    async fn exchange_unbounded(
        &self,
        method: Method,
        path: &str,
        json: Option<String>,
    ) -> Result<Reply, Failure> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, &self.endpoint.authority)
            .header(AUTHORIZATION, self.authorization.clone())
            .header(ACCEPT, "application/json")
            .header(CONNECTION, "close")
            .header("OData-Version", "4.0");
        if json.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(json.unwrap_or_default())))
            .map_err(|e| Failure::Protocol(format!("the request to {path} is not valid ({e})")))?;
        let _one = self.one_at_a_time.lock().await;
        let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(|e| Failure::Unreachable(format!("connect: {e}")))?;
        // A lost Nagle delay costs nothing here and saves one on the request's two writes.
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => send(TokioIo::new(tcp), request).await,
            Some(connector) => {
                let name = self.endpoint.server_name.clone();
                let tls = connector.connect(name, tcp).await.map_err(tls_failure)?;
                send(TokioIo::new(tls), request).await
            }
        }
    }
}

/// Sends one request on a fresh connection and reads its whole answer.
async fn send<T>(io: T, request: Request<Full<Bytes>>) -> Result<Reply, Failure>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| Failure::Unreachable(format!("http: {e}")))?;
    // The connection runs beside the request and is stopped with it, whatever the exit path:
    // an exchange cut by its bound leaves no socket behind.
    let driver = AbortOnDrop(tokio::spawn(connection));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| Failure::Unreachable(format!("http: {e}")))?;
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get(LOCATION)
        .and_then(|l| l.to_str().ok())
        .map(str::to_string);
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(
            |e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                Some(_) => Failure::Protocol(format!("an answer of more than {MAX_BODY} bytes")),
                None => Failure::Unreachable(format!("reading the answer: {e}")),
            },
        )?
        .to_bytes();
    drop(driver);
    Ok(Reply {
        status,
        location,
        body,
    })
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A TLS failure: a certificate refused says what was presented and what to configure; a broken
/// connection is unreachable.
fn tls_failure(error: std::io::Error) -> Failure {
    let Some(e) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return Failure::Unreachable(format!("tls: {error}"));
    };
    match (trust::refusal(e), e) {
        (Some(refusal), _) => Failure::Protocol(refusal.explain()),
        (None, rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented) => {
            Failure::Protocol(format!(
                "its TLS certificate was refused ({e}); give the CA that signed it in ca_file, \
                 or pin the BMC's own certificate (in ca_file, or by tls_fingerprint)"
            ))
        }
        (None, e) => Failure::Protocol(format!("the TLS handshake failed ({e})")),
    }
}

/// The TLS client for a target: its certificate checked by [`Verifier`] (the CA file and its
/// pins, the fingerprint, the system's roots, or any with `insecure`).
fn client_config(target: &RedfishTarget, endpoint: &Endpoint) -> Result<ClientConfig, TargetError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Verifier::new(target, endpoint, &provider)?;
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring offers rustls's default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}
