//! A mocked Kubernetes API server for contract tests: kube's own client over tower-test's mock
//! service (as kube's tests and its controller example do), so a test sees each request fleet
//! sends (its exact method, path, query and body) and scripts each answer. Every call is
//! recorded, so a test can check that fleet made no call outside `JOB_CALLS`, the list the RBAC
//! in `deploy/` must grant.
//!
//! What it cannot prove: the API server's validation, admission and RBAC, and the Job
//! controller's timing (SPEC §3.12).

use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

/// Every call fleet's Job code makes, as (method, path with `{namespace}` and `{name}`, the
/// RBAC verb, the API group, the resource), for the RBAC in `deploy/base/rbac.yaml` to be
/// checked against: create, get and list Jobs, list their pods.
pub const JOB_CALLS: [(&str, &str, &str, &str, &str); 4] = [
    (
        "POST",
        "/apis/batch/v1/namespaces/{namespace}/jobs",
        "create",
        "batch",
        "jobs",
    ),
    (
        "GET",
        "/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
        "get",
        "batch",
        "jobs",
    ),
    (
        "GET",
        "/apis/batch/v1/namespaces/{namespace}/jobs",
        "list",
        "batch",
        "jobs",
    ),
    (
        "GET",
        "/api/v1/namespaces/{namespace}/pods",
        "list",
        "",
        "pods",
    ),
];

/// The template of `JOB_CALLS` a concrete (method, path) is, if any.
pub fn job_call(method: &str, path: &str) -> Option<&'static str> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    JOB_CALLS.iter().find_map(|(m, template, ..)| {
        let want: Vec<&str> = template.trim_start_matches('/').split('/').collect();
        let fits = *m == method
            && want.len() == parts.len()
            && want
                .iter()
                .zip(&parts)
                .all(|(w, p)| (w.starts_with('{') && !p.is_empty()) || w == p);
        fits.then_some(*template)
    })
}

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub method: String,
    pub path: String,
    /// The raw query string, as sent (empty when none).
    pub query: String,
    /// The JSON body, `Null` when there is none.
    pub body: Value,
}

/// The server's side of the mock: each request, and an answer for it.
pub struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
    calls: Vec<Call>,
}

/// A client in `namespace` whose every request reaches the returned server.
pub fn mock_client(namespace: &str) -> (kube::Client, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (
        kube::Client::new(service, namespace.to_owned()),
        ApiServer {
            handle,
            calls: Vec::new(),
        },
    )
}

impl ApiServer {
    /// The next request and its responder; `None` when every client is gone. Bounded: a
    /// request that never comes fails the test.
    pub async fn next(&mut self) -> Option<(Call, SendResponse<Response<Body>>)> {
        let (request, send) =
            tokio::time::timeout(Duration::from_secs(60), self.handle.next_request())
                .await
                .expect("no request to the API server within 60s")?;
        let (parts, body) = request.into_parts();
        let bytes = body
            .collect_bytes()
            .await
            .expect("reading the request body");
        let call = Call {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body: if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("a JSON body")
            },
        };
        self.calls.push(call.clone());
        Some((call, send))
    }

    /// Takes the next request, answers it with `status` and `body`, and returns it.
    pub async fn answer(&mut self, status: u16, body: Value) -> Call {
        let (call, send) = self
            .next()
            .await
            .expect("a request, but every client is gone");
        send.send_response(response(status, &body));
        call
    }

    /// Takes the next request and fails it as a lost connection would: no answer.
    pub async fn drop_connection(&mut self) -> Call {
        let (call, send) = self
            .next()
            .await
            .expect("a request, but every client is gone");
        send.send_error(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        ));
        call
    }

    /// Whether a request comes within `wait` (of the test's clock, paused or not).
    pub async fn quiet_for(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.handle.next_request())
            .await
            .is_err()
    }

    /// Every request so far, in order.
    pub fn calls(&self) -> &[Call] {
        &self.calls
    }

    /// Asserts that every request so far is one of `JOB_CALLS`.
    pub fn assert_only_job_calls(&self) {
        for call in &self.calls {
            assert!(
                job_call(&call.method, &call.path).is_some(),
                "{} {} is not in JOB_CALLS: the RBAC would not grant it",
                call.method,
                call.path
            );
        }
    }
}

/// A response with a JSON body.
pub fn response(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("a JSON body")))
        .expect("a response")
}

/// The API server's refusal, as it words one.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// A list of `items` of `kind` (`JobList`, `PodList`).
pub fn list(api_version: &str, kind: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": { "resourceVersion": "1" },
        "items": items,
    })
}
